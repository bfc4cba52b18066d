#!/usr/bin/env node
// The `svc` CLI (apps and keys). It runs the TypeScript sources through tsx, with
// the `source` export condition so the workspace packages resolve to their sources.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const entry = fileURLToPath(new URL("../server/cli/main.ts", import.meta.url));
const child = spawn(process.execPath, ["--conditions=svc-source", "--import", import.meta.resolve("tsx"), entry, ...process.argv.slice(2)], { stdio: "inherit" });
child.on("exit", (code, signal) => (signal ? process.kill(process.pid, signal) : process.exit(code ?? 1)));
