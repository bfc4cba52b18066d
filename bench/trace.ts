/**
 * Where the time of a run goes on the service path, to go with bench/runs.ts:
 * the same set-up (server in this process, a real worker process, the model
 * stand-in), with the server's objects wrapped from outside (no server change)
 * so each step is timed.
 *
 *   node --conditions=svc-source --import tsx bench/trace.ts [pglite|postgres] [load]
 *
 * Without `load`: runs one at a time (SVC_TRACE_RUNS, default 60); the last
 * round trip's timeline, and per round trip the median time of each step.
 * With `load`: 16 runs in flight (SVC_TRACE_SECONDS, default 5); each step's
 * median and p99 under that load and how often it runs per run; prints the
 * window in the clock of a `node --cpu-prof` profile, to look at just that part.
 * SVC_TRACE_WORKER_PROF=<dir>: the worker process writes a --cpu-prof profile there.
 * SVC_TRACE_TOOLS=<n>: runs of n tool round trips (default 3), to see what grows with a run's length;
 * SVC_TRACE_RESULT_BYTES=<n>: each tool result with n bytes of random text (default: `{ok: true}`).
 * On Postgres both modes end with what the measured runs wrote: WAL bytes per run (and the WAL range, for
 * `pg_waldump --stats=record`), how much each index of `runs` grew per run, and the CPU per run of the
 * database's backends (read from /proc: Postgres on this machine). Both analyse the database after the
 * warm-up, as a deployment's tables are (SVC_BENCH_ANALYZE=0: measured as a fresh database is).
 */
import { readFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { sseFrames } from "../test/helpers/sse.js";
import { pairMachine, percentile, removeTempDirs, scratchPostgres, spawnNode, spawnWorker, startBenchServer, withStatistics } from "./lib.js";
import type { DatabaseTarget } from "../server/db/open.js";
import { durations, mark, marks, traceDispatch, wrap } from "./instruments.js";

const which = process.argv[2] ?? "pglite";
const loadMode = process.argv[3] === "load";
const RUNS = Number(process.env.SVC_TRACE_RUNS ?? 60);
const WARMUP = Math.min(10, Math.floor(RUNS / 3));
const SECONDS = Number(process.env.SVC_TRACE_SECONDS ?? 5);
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const USER = "trace-user";
// SVC_TRACE_RESULT_BYTES=<n>: each tool result carries n bytes of random text (a page, a file: what real tools return), default none.
const RESULT_BYTES = Number(process.env.SVC_TRACE_RESULT_BYTES ?? 0);
const toolResult = () => (RESULT_BYTES > 0 ? { ok: true, data: randomBytes(Math.ceil((RESULT_BYTES * 3) / 4)).toString("base64").slice(0, RESULT_BYTES) } : { ok: true });
// SVC_TRACE_TOOLS=<n>: a run of n tool round trips (the stand-in calls the tools one after another), default 3.
const TOOLS = Array.from({ length: Number(process.env.SVC_TRACE_TOOLS ?? 3) }, (_, i) => ({ name: ["weather", "museums", "cafes"][i] ?? `tool_${i + 1}` }));

// ---------------------------------------------------------------- set-up

const model = spawnNode(["--import", "tsx", "bench/model-standin.ts"]);
const modelUrl = (await model.waitFor(/^(http:\/\/\S+)$/m))[1];
model.quiet();
let drop: (() => Promise<void>) | null = null;
let target: DatabaseTarget = { kind: "pglite", dataDir: null };
if (which === "postgres") {
  const s = await scratchPostgres(POSTGRES_URL);
  if ("error" in s) throw new Error(`Postgres at ${POSTGRES_URL}: ${s.error}`);
  drop = s.drop;
  target = { kind: "postgres", url: s.url };
}
const server = await startBenchServer(target);
const home = await pairMachine(server, USER, { runtimes: { ollama: modelUrl, llamacpp: false, lmstudio: false } });
const profDir = process.env.SVC_TRACE_WORKER_PROF;
// What worker/bin/svc-worker.js runs inside the repository, started directly to take the flag.
const worker = profDir
  ? spawnNode(["--cpu-prof", `--cpu-prof-dir=${profDir}`, "--conditions=svc-source", "--import", "tsx", "worker/src/main.ts", "start"], { SVC_WORKER_HOME: home })
  : spawnWorker(home);
await worker.waitFor(/Connected/);
worker.quiet();

const sv = server.services;
wrap(server.db, "query", (a) => `sql ${String(a[0]).replace(/\s+/g, " ").slice(0, 40)}`);
wrap(server.db.prisma, "$transaction", () => "prisma $transaction (run start)");
wrap(sv.keys, "verifyAppKey", () => "auth: verifyAppKey (Prisma)");
wrap(sv.runs, "start", () => "RunService.start");
wrap(sv.runs, "answerToolCall", () => "RunService.answerToolCall");
wrap(sv.runs, "find", () => "RunService.find (Prisma)");
wrap(sv.runStore, "inputs", () => "store.inputs");
wrap(sv.runStore, "write", () => "store.write");
wrap(sv.runEngine, "wake", () => "engine.wake");
wrap(sv.runBus, "publish", () => "bus.publish");
traceDispatch(sv.workers, "[job] dispatch -> first event back");

const headers = { authorization: `Bearer ${server.appKey}`, "content-type": "application/json" };
const body = JSON.stringify({ user: USER, prompt: "Plan my afternoon.", tools: TOOLS });
const med = (a: number[]) => percentile(a, 50);
const f = (n: number) => n.toFixed(2).padStart(7);

// ---------------------------------------------------------------- Postgres's writes

/**
 * The CPU time (ms) the scratch database's backends have used so far, by pid, read from `/proc` (Postgres on this
 * machine, as the bench starts it; empty when `/proc` cannot be read). The clock ticks are 10 ms: measure hundreds
 * of runs.
 */
async function backendCpu(): Promise<Map<number, number>> {
  const rows = await server.db.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = current_database()");
  const tick = 1000 / 100;
  const cpu = new Map<number, number>();
  for (const { pid } of rows) {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => null);
    // Fields 14 and 15 (utime, stime), counted after the command's closing parenthesis.
    const fields = stat?.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields) cpu.set(pid, (Number(fields[11]) + Number(fields[12])) * tick);
  }
  return cpu;
}

/** The WAL position now, the size of each index of `runs` and the backends' CPU (Postgres only). */
async function pgWrites(): Promise<{ lsn: string; indexes: Map<string, number>; cpu: Map<number, number> } | null> {
  if (which !== "postgres") return null;
  const cpu = await backendCpu();
  const [{ lsn }] = await server.db.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
  const rows = await server.db.query<{ name: string; bytes: string }>(
    "SELECT c.relname AS name, pg_relation_size(c.oid)::text AS bytes FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'runs'::regclass ORDER BY 1",
  );
  return { lsn, indexes: new Map(rows.map((r) => [r.name, Number(r.bytes)])), cpu };
}

/**
 * WAL bytes and `runs` index bytes per run since `before` (index sizes grow by 8 KB pages: measure a few hundred
 * runs). The WAL range is printed for `pg_waldump --stats=record` (read it before the scratch database is dropped:
 * the drop's checkpoint may recycle the segments).
 */
async function reportWrites(before: Awaited<ReturnType<typeof pgWrites>>, runs: number) {
  const after = await pgWrites();
  if (!before || !after || runs === 0) return;
  const [{ bytes }] = await server.db.query<{ bytes: string }>("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text AS bytes", [after.lsn, before.lsn]);
  const grown = [...after.indexes].map(([name, b]) => ({ name, perRun: (b - (before.indexes.get(name) ?? 0)) / runs }));
  process.stdout.write(
    `Postgres's writes per run (${runs} runs, WAL ${before.lsn} to ${after.lsn}): WAL ${(Number(bytes) / runs).toFixed(0)} bytes; the runs table's indexes grew ${grown.reduce((a, g) => a + g.perRun, 0).toFixed(0)} bytes:\n`,
  );
  for (const g of grown.sort((a, b) => b.perRun - a.perRun)) process.stdout.write(`  ${g.perRun.toFixed(0).padStart(6)} bytes  ${g.name}\n`);
  // A backend that ended meanwhile is left out (its CPU is lost with it); one that began counts from 0.
  const used = [...after.cpu].reduce((sum, [pid, ms]) => sum + ms - (before.cpu.get(pid) ?? 0), 0);
  if (after.cpu.size > 0) process.stdout.write(`Postgres's CPU per run (${after.cpu.size} backends of the database): ${(used / runs).toFixed(2)} ms\n`);
}

// ---------------------------------------------------------------- one at a time

/** Per round trip: the summed time of each step, and the gaps between stages. */
const perRoundTrip = new Map<string, number[]>();
function account(rt: { t: number; what: string }[]) {
  const sums = new Map<string, number>();
  const add = (k: string, v: number) => sums.set(k, (sums.get(k) ?? 0) + v);
  const open = new Map<string, number>();
  for (const m of rt) {
    const label = m.what.slice(2);
    if (m.what.startsWith("> ")) open.set(label, m.t);
    else if (m.what.startsWith("< ") && open.has(label)) {
      add(label, m.t - open.get(label)!);
      open.delete(label);
    }
  }
  const at = (re: RegExp) => rt.find((m) => re.test(m.what))?.t;
  const gap = (k: string, a?: number, b?: number) => a !== undefined && b !== undefined && add(`[gap] ${k}`, b - a);
  gap("app POST tool_result -> auth middleware (client fetch, HTTP, express, ts-rest)", 0, at(/^> auth/));
  gap("job sent -> first job event back (WS, worker, model, WS)", at(/^dispatch job/), at(/^job event/));
  const lastPublish = [...rt].reverse().find((m) => m.what === "< bus.publish")?.t;
  gap("last publish -> frame in hand at the app (SSE)", lastPublish, rt.at(-1)!.t);
  add("[total] round trip", rt.at(-1)!.t);
  for (const [k, v] of sums) (perRoundTrip.get(k) ?? perRoundTrip.set(k, []).get(k)!).push(v);
}

async function oneAtATime() {
  let writes: Awaited<ReturnType<typeof pgWrites>> = null;
  for (let i = 0; i < RUNS; i++) {
    if (i === WARMUP) {
      await withStatistics(server.db);
      writes = await pgWrites();
    }
    const res = await fetch(`${server.url}/v1/runs`, { method: "POST", headers, body });
    const runId = res.headers.get("service-run-id");
    let origin = 0;
    for await (const frame of sseFrames(res)) {
      if (origin && (frame.event === "tool_call" || frame.event === "run_completed")) {
        mark(`app: ${frame.event} frame in hand`);
        const rt = marks.map((m) => ({ t: m.t - origin, what: m.what }));
        origin = 0;
        if (i >= WARMUP) account(rt);
        if (i === RUNS - 1) {
          let prev = 0;
          for (const m of rt) process.stdout.write(`${f(m.t)} ms (+${f(m.t - prev)})  ${m.what}\n`), (prev = m.t);
          process.stdout.write("\n");
        }
      }
      if (frame.event === "tool_call") {
        marks.length = 0;
        origin = performance.now();
        mark("app: result ready, POST tool_result");
        const r = await fetch(`${server.url}/v1/runs/${runId}/tool_result`, { method: "POST", headers, body: JSON.stringify({ callId: frame.data.callId, result: toolResult() }) });
        await r.arrayBuffer();
        mark(`app: tool_result answered ${r.status}`);
      }
    }
  }
  process.stdout.write(`${which}, one run at a time, ${RUNS - WARMUP} runs after ${WARMUP} warm-up; per round trip, median ms (a step's calls summed; steps overlap):\n`);
  for (const [k, v] of [...perRoundTrip].sort((a, b) => med(b[1]) - med(a[1]))) process.stdout.write(`  ${f(med(v))}  in ${String(v.length).padStart(3)} round trips  ${k}\n`);
  await reportWrites(writes, RUNS - WARMUP);
}

// ---------------------------------------------------------------- under load

async function underLoad(seconds: number) {
  const app = { "POST /v1/runs answered": [] as number[], "round trip": [] as number[], "POST tool_result answered": [] as number[] };
  let runs = 0;
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        const res = await fetch(`${server.url}/v1/runs`, { method: "POST", headers, body });
        app["POST /v1/runs answered"].push(performance.now() - t0);
        const runId = res.headers.get("service-run-id");
        let ready = 0;
        const posts: Promise<unknown>[] = [];
        for await (const frame of sseFrames(res)) {
          if ((frame.event === "tool_call" || frame.event === "run_completed") && ready) app["round trip"].push(performance.now() - ready);
          if (frame.event === "tool_call") {
            const p0 = (ready = performance.now());
            const post = fetch(`${server.url}/v1/runs/${runId}/tool_result`, { method: "POST", headers, body: JSON.stringify({ callId: frame.data.callId, result: toolResult() }) });
            posts.push(post.then((r) => r.arrayBuffer()).then(() => app["POST tool_result answered"].push(performance.now() - p0)));
          }
        }
        await Promise.all(posts);
        runs++;
      }
    }),
  );
  marks.length = 0;
  const elapsed = (performance.now() - started) / 1000;
  return { runs, elapsed, app };
}

async function load() {
  await underLoad(1);
  await withStatistics(server.db);
  durations.clear();
  const writes = await pgWrites();
  const from = process.hrtime.bigint() / 1000n;
  const { runs, elapsed, app } = await underLoad(SECONDS);
  const to = process.hrtime.bigint() / 1000n;
  process.stdout.write(`${which}, 16 runs in flight: ${runs} runs in ${elapsed.toFixed(1)} s = ${(runs / elapsed).toFixed(0)} runs/s\n`);
  for (const [k, v] of Object.entries(app)) process.stdout.write(`  app: ${k.padEnd(26)} median ${f(med(v))}  p99 ${f(percentile(v, 99))} ms\n`);
  process.stdout.write(`server steps (ms; per run: calls, and their time summed; steps overlap):\n`);
  const rows = [...durations].map(([k, v]) => ({ k, n: v.length / runs, m: med(v), p: percentile(v, 99), total: v.reduce((a, b) => a + b, 0) / runs }));
  for (const r of rows.sort((a, b) => b.total - a.total)) process.stdout.write(`  median ${f(r.m)}  p99 ${f(r.p)}  ${r.n.toFixed(2).padStart(6)}/run ${f(r.total)} ms/run  ${r.k}\n`);
  process.stdout.write(`window in a --cpu-prof profile's clock (µs): ${from} ${to}\n`);
  await reportWrites(writes, runs);
}

try {
  if (loadMode) await load();
  else await oneAtATime();
} finally {
  await worker.stopGently();
  await server.close();
  model.stop();
  await drop?.();
  removeTempDirs();
}
