#!/usr/bin/env node
// The `svc-worker` CLI. Inside the repository it runs the TypeScript sources
// through tsx (the packed package ships no sources); installed, the compiled `dist/`.
import fs from "node:fs";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const source = fileURLToPath(new URL("../src/main.ts", import.meta.url));
if (fs.existsSync(source)) {
  const child = spawn(process.execPath, ["--conditions=svc-source", "--import", import.meta.resolve("tsx"), source, ...process.argv.slice(2)], { stdio: "inherit" });
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal));
  child.on("exit", (code, signal) => (signal ? process.kill(process.pid, signal) : process.exit(code ?? 1)));
} else {
  await import(new URL("../dist/main.js", import.meta.url).href);
}
