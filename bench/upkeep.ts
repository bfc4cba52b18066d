/**
 * The embedded database with and without statistics (`server/db/upkeep.ts`): PGlite has no
 * autovacuum, so until the server's upkeep analyses its tables the planner reads a run by
 * the app's index of runs by date, and every row naming a run (its events, calls,
 * messages, ledger rows) pays a check that reads all of the app's runs.
 *
 *   npm run bench:upkeep      # = node --conditions=svc-source --import tsx bench/upkeep.ts
 *
 * For each history size (SVC_BENCH_UPKEEP_HISTORY, default "0,2000,10000": runs of the app
 * already stored, written by SQL), a fresh PGlite server, a real worker and the model
 * stand-in: SVC_BENCH_RUNS runs (default 20, after 3 warm-up) one at a time as the database
 * is, then one pass of the upkeep, then as many again. Each run is bench:runs' run (a prompt,
 * three tool round trips, a final answer), side by side in one process: time per run, the
 * round trip's median and the process's CPU per run (PGlite runs in it).
 */
import os from "node:os";
import { Writable } from "node:stream";
import { performance } from "node:perf_hooks";
import { serviceLoop, warmUp, type Loop } from "./app-loop.js";
import { ownCpuMs, pairMachine, percentile, removeTempDirs, spawnNode, spawnWorker, startBenchServer, type Child } from "./lib.js";
import { EmbeddedUpkeep } from "../server/db/upkeep.js";
import { ensureEndUser } from "../server/users/end-users.js";
import { createLogger } from "../server/logger.js";

const HISTORY = (process.env.SVC_BENCH_UPKEEP_HISTORY ?? "0,2000,10000").split(",").map(Number);
const RUNS = Number(process.env.SVC_BENCH_RUNS ?? 20);
const USER = "bench-user";
const f = (n: number, d = 2) => n.toFixed(d);

interface Measure {
  msPerRun: number;
  roundTrip: number;
  cpuPerRun: number;
}

async function measure(loop: Loop): Promise<Measure> {
  const samples: number[] = [];
  const cpu = ownCpuMs();
  const t0 = performance.now();
  for (let i = 0; i < RUNS; i++) await loop(samples);
  return { msPerRun: (performance.now() - t0) / RUNS, roundTrip: percentile(samples, 50), cpuPerRun: (ownCpuMs() - cpu) / RUNS };
}

async function main() {
  process.stdout.write(`bench:upkeep: PGlite, ${RUNS} runs one at a time before and after one pass of the upkeep, histories ${HISTORY.join(", ")}\n`);
  process.stdout.write(`machine: ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} at start\n`);
  const children: Child[] = [];
  const rows = [["runs stored already", "ms per run: before / after", "round trip median, ms", "CPU ms per run (this process)", "after ÷ before"]];
  try {
    const model = spawnNode(["--import", "tsx", "bench/model-standin.ts"]);
    children.push(model);
    const modelUrl = (await model.waitFor(/^(http:\/\/\S+)$/m))[1];
    model.quiet();
    for (const history of HISTORY) {
      const server = await startBenchServer({ kind: "pglite", dataDir: null });
      let worker: Child | null = null;
      try {
        const endUserId = await ensureEndUser(server.db, { appId: server.appId, environment: "test" }, "history");
        await server.db.query(
          `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, created_at, finished_at)
           SELECT 'run_history_' || g, $1, 'test', $2, 'runs', 'm', '{}', 'completed', now() - g * interval '1 second', now() FROM generate_series(1, $3::int) g`,
          [server.appId, endUserId, history],
        );
        const home = await pairMachine(server, USER, { runtimes: { ollama: modelUrl, llamacpp: false, lmstudio: false } });
        worker = spawnWorker(home);
        await worker.waitFor(/Connected/);
        worker.quiet();
        const loop = serviceLoop(server, USER);
        for (let i = 0; i < 3; i++) await warmUp(loop);
        const before = await measure(loop);
        const t = performance.now();
        const pass = await new EmbeddedUpkeep(server.db, createLogger("silent", new Writable({ write: (_c, _e, cb) => cb() }))).pass();
        const passMs = performance.now() - t;
        const after = await measure(loop);
        rows.push([
          `${history} (the pass: ${pass.analyzed.length} analysed, ${pass.vacuumed.length} vacuumed, ${f(passMs, 0)} ms)`,
          `${f(before.msPerRun)} / ${f(after.msPerRun)}`,
          `${f(before.roundTrip)} / ${f(after.roundTrip)}`,
          `${f(before.cpuPerRun, 1)} / ${f(after.cpuPerRun, 1)}`,
          `${f(after.msPerRun / before.msPerRun)}×`,
        ]);
      } finally {
        worker?.stop();
        await server.close();
      }
    }
  } finally {
    for (const c of children) c.stop();
    removeTempDirs();
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  for (const r of rows) process.stdout.write(`  ${r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ")}\n`);
}

await main();
process.exit(0);
