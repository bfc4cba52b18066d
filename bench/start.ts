// `npm run bench:start`: the service's start, before and after the production build, side by side in
// one run: time from spawning the process to the first answer of /healthz, and resident memory after
// it has sat idle. Each variant starts N times on a copy of one migrated data folder (so the first
// start's migrations are not counted), on the same machine, interleaved.
//
//   before:  Node 20 (the machine's), the TypeScript sources through tsx (what `npm start` ran before issue 30)
//   tsx 24:  Node 24, the sources through tsx
//   after:   Node 24, dist/server/main.js (what `npm start` runs now: no compiler)
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const N = Number(process.env.BENCH_STARTS ?? 5);
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 5000);
const node24 = path.join(ROOT, "node_modules/.bin/node");
const node20 = process.env.BENCH_NODE_BEFORE ?? "/usr/bin/node";
const tsx = ["--conditions=svc-source", "--import", "tsx", "server/main.ts"];
const variants = [
  { name: "before (Node 20 + tsx)", node: node20, args: tsx },
  { name: "Node 24 + tsx", node: node24, args: tsx },
  { name: "after (Node 24, built)", node: node24, args: ["--enable-source-maps", "dist/server/main.js"] },
];

execFileSync(process.execPath, [path.join(ROOT, "scripts/build-server.mjs"), "--if-stale"], { stdio: "inherit" });
const version = (bin: string) => execFileSync(bin, ["--version"]).toString().trim();
for (const v of variants) v.name += ` [${version(v.node)}]`;

let port = 4700 + Math.floor(Math.random() * 200);
const template = fs.mkdtempSync(path.join(os.tmpdir(), "svc-bench-start-"));

async function start(v: (typeof variants)[number], dataDir: string) {
  const p = port++;
  const began = performance.now();
  const child = spawn(v.node, v.args, { cwd: ROOT, env: { ...process.env, PORT: String(p), SVC_DATA_DIR: dataDir, LOG_LEVEL: "warn" }, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${v.name} exited ${child.exitCode}: ${stderr}`);
    try {
      const res = await fetch(`http://127.0.0.1:${p}/healthz`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const firstAnswerMs = performance.now() - began;
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const status = fs.readFileSync(`/proc/${child.pid}/status`, "utf8");
  const rssMb = Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
  child.kill("SIGTERM");
  await new Promise((r) => child.once("exit", r));
  return { firstAnswerMs, rssMb };
}

// One start migrates the template; every measured start runs on a copy of it.
await start(variants[2], path.join(template, "data"));
const results = new Map(variants.map((v) => [v.name, [] as { firstAnswerMs: number; rssMb: number }[]]));
for (let i = 0; i < N; i++) {
  for (const v of variants) {
    const dir = path.join(template, `run-${i}-${variants.indexOf(v)}`);
    fs.cpSync(path.join(template, "data"), dir, { recursive: true });
    fs.rmSync(path.join(dir, "svc.lock"), { recursive: true, force: true });
    results.get(v.name)!.push(await start(v, dir));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
fs.rmSync(template, { recursive: true, force: true });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const before = results.get(variants[0].name)!;
const b = { t: median(before.map((r) => r.firstAnswerMs)), m: median(before.map((r) => r.rssMb)) };
console.log(`\n${N} starts each, medians; load average at the end ${os.loadavg()[0].toFixed(2)}\n`);
console.log("| variant | time to first answer | ÷ before | RSS idle (after " + IDLE_MS / 1000 + " s) | ÷ before |\n| --- | --- | --- | --- | --- |");
for (const v of variants) {
  const rs = results.get(v.name)!;
  const t = median(rs.map((r) => r.firstAnswerMs));
  const m = median(rs.map((r) => r.rssMb));
  console.log(`| ${v.name} | ${t.toFixed(0)} ms | ${(t / b.t).toFixed(2)}× | ${m.toFixed(0)} MB | ${(m / b.m).toFixed(2)}× |`);
}
