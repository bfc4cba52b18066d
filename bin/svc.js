#!/usr/bin/env node
// The `svc` CLI (apps, keys, plans, owners). It runs the production build (dist/server/cli.js),
// building it first when the sources changed since (scripts/build-server.mjs).
import { spawnSync, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const build = fileURLToPath(new URL("../scripts/build-server.mjs", import.meta.url));
const built = spawnSync(process.execPath, [build, "--if-stale"], { stdio: ["ignore", "ignore", "inherit"] });
if (built.status !== 0) process.exit(built.status ?? 1);
const entry = fileURLToPath(new URL("../dist/server/cli.js", import.meta.url));
const child = spawn(process.execPath, ["--enable-source-maps", entry, ...process.argv.slice(2)], { stdio: "inherit" });
child.on("exit", (code, signal) => (signal ? process.kill(process.pid, signal) : process.exit(code ?? 1)));
