/**
 * The floor of the service's path on this machine: the same processes and hops as a run
 * through the service, with nothing done at them.
 *
 *   npm run bench:floor            (node --conditions=svc-source --import tsx bench/floor.ts)
 *
 * Four paths, the same run as bench:runs (a prompt, three tool round trips, a final answer),
 * the same model stand-in (a separate process) and the same tools in this process:
 *
 *  - in-process: the app's own loop with the worker's adapter (bench/baseline-loop.ts);
 *  - bare relays: the app's loop of the service (bench/app-loop.ts: POST /v1/runs, its SSE
 *    stream, tool results posted back) against a relay in this process that does nothing
 *    but forward: an answer goes at once over a WebSocket to a bare worker process
 *    (bench/floor-worker.ts), which runs the model turn with the worker's adapter and sends
 *    each event back as it comes; a tool call, or the run's end, goes out as an SSE frame;
 *  - bare relays + 2 statements: the same, with one Postgres statement (an INSERT, prepared,
 *    committed) before an answer is forwarded and acknowledged, and one before a tool call
 *    or the end is relayed: the two writes a round trip of the service must wait for (an
 *    answer is durable before its 200; a `/v1/runs` event is stored before it is relayed);
 *  - service: the real server in this process, a real `svc-worker` process, Postgres.
 *
 * What the bare relays add to a round trip is what the topology costs on this machine, with
 * no service in it: the lowest any implementation of this path could add here. Latency runs
 * one run at a time, the four paths in turn; throughput keeps 16 runs in flight, with the CPU
 * time of this process (the app's client and the relay or the server) and of the worker.
 *
 * Options (environment): SVC_BENCH_RUNS (latency runs per path, default 100), SVC_BENCH_SECONDS
 * (throughput window, default 5), SVC_BENCH_POSTGRES_URL (admin URL, default
 * postgres://postgres@127.0.0.1:5432/postgres; a scratch database is created and dropped).
 * Postgres is needed: without it the bench says so and stops.
 */
import os from "node:os";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { baselineLoop } from "./baseline-loop.js";
import { startFloorRelay, startFloorWorker } from "./floor-relay.js";
import { ROUND_TRIPS, serviceLoop, throughput, warmUp, type Loop, type Samples } from "./app-loop.js";
import { groupCpuMs, ownCpuMs, pairMachine, percentile, removeTempDirs, scratchPostgres, spawnNode, spawnWorker, startBenchServer, withStatistics, type Child } from "./lib.js";

const LATENCY_RUNS = Number(process.env.SVC_BENCH_RUNS ?? 100);
const WARMUP_RUNS = 20;
const PARALLEL = 16;
const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 5);
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
/** Issue 19's round-trip targets, added to the in-process loop's. */
const TARGET = { addedMedianMs: 1.5, addedP99Ms: 5 };

// ---------------------------------------------------------------- measuring

interface Path {
  name: string;
  loop: Loop;
  /** Process group of its worker, for the worker's CPU per run. */
  workerPgid: number | null;
  samples: Samples;
}

interface Measured {
  name: string;
  median: number;
  p99: number;
  rps: number;
  cpuBench: number;
  cpuWorker: number;
}

const f = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");

async function main() {
  const startedAt = performance.now();
  process.stdout.write(`bench:floor: a run = ${ROUND_TRIPS} tool round trips + a final answer; in-process, bare relays (no service), bare relays + 2 Postgres statements, the service on Postgres\n`);
  process.stdout.write(`machine: ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} at start\n`);
  const scratch = await scratchPostgres(POSTGRES_URL);
  if ("error" in scratch) {
    process.stdout.write(`Postgres is not reachable at ${POSTGRES_URL} (${scratch.error}): set SVC_BENCH_POSTGRES_URL.\n`);
    process.exitCode = 1;
    return;
  }
  const children: Child[] = [];
  const closers: (() => Promise<void>)[] = [];
  try {
    const model = spawnNode(["--import", "tsx", "bench/model-standin.ts"]);
    children.push(model);
    const modelUrl = (await model.waitFor(/^(http:\/\/\S+)$/m))[1];
    model.quiet();

    // The statements of the third path: an INSERT, prepared once per connection, each its own commit.
    const pool = new pg.Pool({ connectionString: scratch.url, max: 8 });
    // An idle connection ended by the server (the scratch database's teardown) is an 'error' on the pool: not the bench's failure.
    pool.on("error", () => {});
    closers.push(() => pool.end());
    await pool.query("CREATE TABLE floor_rows (run text NOT NULL, at timestamptz NOT NULL DEFAULT now(), body jsonb)");
    let n = 0;
    const insert = (run: string) => pool.query({ name: "floor_row", text: "INSERT INTO floor_rows (run, body) VALUES ($1, $2)", values: [run, `{"n":${++n}}`] }).then(() => {});

    const paths: Path[] = [{ name: "in-process", loop: baselineLoop(modelUrl), workerPgid: null, samples: [] }];
    for (const [name, store] of [["bare relays", null], ["bare relays + 2 statements", insert]] as const) {
      const relay = await startFloorRelay(store);
      closers.push(relay.close);
      const worker = await startFloorWorker(relay, modelUrl);
      children.push(worker);
      paths.push({ name, loop: serviceLoop({ url: relay.url, appKey: "none" }, "bench-user"), workerPgid: worker.child.pid!, samples: [] });
    }
    const server = await startBenchServer({ kind: "postgres", url: scratch.url });
    closers.push(() => server.close());
    const home = await pairMachine(server, "bench-user", { runtimes: { ollama: modelUrl, llamacpp: false, lmstudio: false } });
    const worker = spawnWorker(home);
    children.push(worker);
    await worker.waitFor(/Connected/);
    worker.quiet();
    paths.push({ name: "service (Postgres)", loop: serviceLoop(server, "bench-user"), workerPgid: worker.child.pid!, samples: [] });

    process.stdout.write(`  latency: ${WARMUP_RUNS} warm-up + ${LATENCY_RUNS} runs per path, one at a time, the paths in turn (the first rotating)...\n`);
    for (let i = 0; i < WARMUP_RUNS; i++) for (const p of paths) await warmUp(p.loop);
    // The service's tables and the floor's table, as a deployment's are after autovacuum's pass.
    await withStatistics(server.db);
    for (let i = 0; i < LATENCY_RUNS; i++) for (let k = 0; k < paths.length; k++) {
      const p = paths[(i + k) % paths.length];
      await p.loop(p.samples);
    }
    const measured: Measured[] = [];
    for (const p of paths) {
      process.stdout.write(`  throughput: ${p.name}, ${PARALLEL} in flight, ${SECONDS} s...\n`);
      const cpu = () => ({ bench: ownCpuMs(), worker: p.workerPgid ? groupCpuMs(p.workerPgid) : 0 });
      const t = await throughput(p.loop, { warmSeconds: 1, seconds: SECONDS, parallel: PARALLEL, cpu });
      measured.push({ name: p.name, median: percentile(p.samples, 50), p99: percentile(p.samples, 99), rps: t.perSecond, cpuBench: t.cpuPerRun.bench, cpuWorker: t.cpuPerRun.worker });
    }
    report(measured);
  } finally {
    for (const c of children) c.stop();
    for (const close of closers.reverse()) await close().catch(() => {});
    await scratch.drop().catch(() => {});
    removeTempDirs();
  }
  process.stdout.write(`  Total ${((performance.now() - startedAt) / 1000).toFixed(0)} s.\n`);
}

function report(m: Measured[]) {
  const base = m[0];
  const rows = [["path", "round trip median / p99, ms", "added median / p99, ms", `runs/s, ${PARALLEL} in flight`, "CPU ms per run: bench process / worker"]];
  for (const r of m) {
    const added = r === base ? "" : `+${f(r.median - base.median)} / +${f(r.p99 - base.p99)}`;
    rows.push([r.name, `${f(r.median)} / ${f(r.p99)}`, added, f(r.rps, 0), `${f(r.cpuBench, 1)} / ${r === base ? "-" : f(r.cpuWorker, 1)}`]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  process.stdout.write(`\n${rows.map((row) => "  " + row.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ")).join("\n")}\n\n`);
  const [, bare, floor, svc] = m;
  const add = (r: Measured) => r.median - base.median;
  const addP99 = (r: Measured) => r.p99 - base.p99;
  process.stdout.write(
    [
      `  the topology alone (bare relays) adds +${f(add(bare))} ms median, +${f(addP99(bare))} p99: ${f(add(bare) / TARGET.addedMedianMs)}× the +${TARGET.addedMedianMs} ms target's median`,
      `  with the two writes a round trip waits for: +${f(add(floor))} / +${f(addP99(floor))} ms (targets +${TARGET.addedMedianMs} / +${TARGET.addedP99Ms})`,
      `  the service above that floor: +${f(add(svc) - add(floor))} ms median; service ÷ floor, added median: ${f(add(svc) / add(floor))}×; CPU per run, service ÷ floor: ${f(svc.cpuBench / floor.cpuBench)}× (bench process), ${f(svc.cpuWorker / floor.cpuWorker)}× (worker)`,
    ].join("\n") + "\n",
  );
}

try {
  await main();
} catch (err) {
  process.stderr.write(`bench:floor failed: ${(err as Error).stack ?? String(err)}\n`);
  removeTempDirs();
  process.exit(1);
}
process.exit(process.exitCode ?? 0);
