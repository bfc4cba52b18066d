#!/usr/bin/env node
// The `svc-worker` CLI. Installed from the package it runs the compiled `dist/`;
// inside the repository (no `dist/` yet) it runs the TypeScript sources through tsx.
import fs from "node:fs";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const compiled = new URL("../dist/main.js", import.meta.url);
if (fs.existsSync(fileURLToPath(compiled))) {
  await import(compiled.href);
} else {
  const entry = fileURLToPath(new URL("../src/main.ts", import.meta.url));
  const child = spawn(process.execPath, ["--conditions=source", "--import", import.meta.resolve("tsx"), entry, ...process.argv.slice(2)], { stdio: "inherit" });
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal));
  child.on("exit", (code, signal) => (signal ? process.kill(process.pid, signal) : process.exit(code ?? 1)));
}
