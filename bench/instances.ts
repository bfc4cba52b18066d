/**
 * Runs across several server instances on one Postgres (issue 19).
 *
 *   npm run bench:instances       (node --conditions=svc-source --import tsx bench/instances.ts)
 *
 * The instances are real server processes (test/helpers/process.ts, as the
 * multi-instance tests start them) on one scratch Postgres database, so each one's
 * CPU time is read from /proc. A real `svc-worker start` process is paired on
 * instance W and holds its connection there; the model stand-in is a process of
 * its own (bench/model-standin.ts). The app's side is bench/app-loop.ts (raw fetch
 * and SSE, as in bench:runs), in this process.
 *
 *  (a) server CPU per run, 1 instance against 3 and 6: 16 runs in flight through a TCP
 *      balancer (test/helpers/balancer.ts, each new connection to the next backend),
 *      first with W alone behind it, then with W, A and C, then with D, E and F too;
 *      the CPU time of every running instance in the window, summed, divided by the
 *      runs completed in it. Target: 3 instances ≤ 1.10 × 1 instance (issue 19), and
 *      6 (issue 31). With each phase, what Postgres saw: the connections open to the
 *      database at the window's end (pg_stat_activity), and the transactions
 *      committed per run in the window (pg_stat_database.xact_commit; the service's
 *      statements are each their own transaction, but for the few it groups), and the
 *      stored steps Postgres announced per run (`NOTIFY svc_run_event`, heard by a LISTEN
 *      of the bench's own: on Postgres alone, only runs read on another instance than
 *      their driver's are announced).
 *  (b) the tool round trip when the app talks to an instance other than the one
 *      driving the run (posts and streams on A, the run driven on W) against the
 *      same instance (everything on W): one run at a time, alternating.
 *      Target: added ≤ 1 ms at the median (p99 printed).
 *
 * Options (environment): SVC_BENCH_SECONDS (each CPU window, default 5),
 * SVC_BENCH_WARM_SECONDS (warm-up before each, default 3), SVC_BENCH_PARALLEL (runs
 * in flight, default 16), SVC_BENCH_RUNS (runs per side for (b), default 150),
 * SVC_BENCH_POSTGRES_URL (admin URL, default postgres://postgres@127.0.0.1:5432/postgres;
 * a scratch database is created and dropped), SVC_BENCH_POOLER=pgbouncer (the instances'
 * pools go through a PgBouncer of the bench's own in transaction mode, SVC_BENCH_POOL_SIZE
 * server connections, default 20; their LISTEN and the first start's lock on the direct URL), SVC_BENCH_LOG_LEVEL (the instances', default
 * info), SVC_BENCH_BUS=nats (run events on the NATS run bus, `NATS_URL`, on a nats-server of the bench's
 * own with JetStream; each phase then prints the NATS messages per run, in and out, from its /varz),
 * SVC_BENCH_STRICT=1 (exit 1 on a miss).
 */
import os from "node:os";
import pg from "pg";
import { performance } from "node:perf_hooks";
import { serviceLoop, throughput, warmUp, ROUND_TRIPS, type Loop, type Samples } from "./app-loop.js";
import { groupCpuMs, pairMachine, percentile, pidCpuMs, removeTempDirs, scratchPostgres, spawnNode, spawnWorker, tempDir, type Child } from "./lib.js";
import { pollUntil, startServerProcess, type ServerProcess } from "../test/helpers/process.js";
import { startBalancer, type Balancer } from "../test/helpers/balancer.js";
import { startPgBouncer, type PgBouncer } from "../test/helpers/pgbouncer.js";
import { startNats, type Nats } from "../test/helpers/nats.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 5);
const WARM_SECONDS = Number(process.env.SVC_BENCH_WARM_SECONDS ?? 3);
const PARALLEL = Number(process.env.SVC_BENCH_PARALLEL ?? 16);
const LATENCY_RUNS = Number(process.env.SVC_BENCH_RUNS ?? 150);
const WARMUP_RUNS = 30;
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const USER = "bench-user";
/** How long the three instances are watched idle. */
const IDLE_SECONDS = 3;
const POOLER = process.env.SVC_BENCH_POOLER === "pgbouncer";
const POOLER_SIZE = Number(process.env.SVC_BENCH_POOL_SIZE ?? 20);
/** The bench's NATS server, when SVC_BENCH_BUS=nats. */
let nats: Nats | null = null;
/** The bench's PgBouncer, when SVC_BENCH_POOLER=pgbouncer. */
let bouncer: PgBouncer | null = null;

/** Issue 19: 3 instances cost at most 10 % more server CPU per run than 1; another instance adds ≤ 1 ms per round trip. */
const TARGET = { cpuRatio: 1.1, addedMedianMs: 1 };

/** Every server process started, killed on exit however the bench ends (they are not in a group of their own). */
const servers: ServerProcess[] = [];
process.on("exit", () => {
  for (const s of servers) if (s.running) s.child.kill("SIGKILL");
});

/** An instance on the shared database; the first one migrates it and prints the dev app (SVC_DEV_APP=1), the others do not. */
async function instance(databaseUrl: string, name: string, first: boolean): Promise<ServerProcess & { name: string }> {
  const s = await startServerProcess(tempDir("svc-bench-inst-"), {
    DATABASE_URL: bouncer ? bouncer.through(databaseUrl) : databaseUrl,
    DATABASE_DIRECT_URL: bouncer ? databaseUrl : "",
    SVC_DEV_APP: first ? "1" : "",
    NATS_URL: nats?.url ?? "",
    LOG_LEVEL: process.env.SVC_BENCH_LOG_LEVEL ?? "info",
    // 64 streams at once for one app would be refused by the default cap.
    MAX_STREAMS_PER_APP: "100000",
  });
  servers.push(s);
  return Object.assign(s, { name });
}

/**
 * A balancer in front of `backends`, handing new connections out round robin: the helper
 * tries the backends in the order its list iterates, and this list starts one further on
 * each time it is iterated. A balancer of its own per phase: the app's pooled keep-alive
 * connections to one never carry over to the next.
 */
async function roundRobin(backends: ServerProcess[]): Promise<Balancer> {
  const list = backends.map((s) => ({ host: "127.0.0.1", port: Number(new URL(s.url).port) }));
  let next = 0;
  const rotating = new Proxy(list, {
    get(target, key, receiver) {
      if (key !== Symbol.iterator) return Reflect.get(target, key, receiver);
      const start = next++ % target.length;
      return function* () {
        for (let i = 0; i < target.length; i++) yield target[(start + i) % target.length];
      };
    },
  });
  return startBalancer(rotating);
}

interface Phase {
  label: string;
  rps: number;
  runs: number;
  /** Server CPU ms per run, summed over the running instances, and each instance's. */
  serverCpu: number;
  perInstance: Record<string, number>;
  workerCpu: number;
  /** New connections the balancer gave each instance in the phase (warm-up included). */
  connections: Record<string, number>;
  loadMedian: number;
  loadP99: number;
  /** Connections open to the database at the window's end, all instances. */
  pgConnections: number;
  /** Transactions Postgres committed on the database per run completed in the window. */
  pgCommitsPerRun: number;
  /** Messages NATS took in and sent out per run completed (the run bus only). */
  natsMsgsPerRun: number;
  /** Stored steps announced (`NOTIFY svc_run_event`) per run completed. */
  stepNoticesPerRun: number;
}

/** Stored steps Postgres announced so far on the bench's database (`svc_run_event`), heard by `listenForSteps`. */
let stepNotices = 0;
async function listenForSteps(url: string): Promise<() => Promise<void>> {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => {});
  await c.connect();
  c.on("notification", () => stepNotices++);
  await c.query("LISTEN svc_run_event");
  return () => c.end();
}

/** NATS's count of messages in and out so far (0 without the bus). */
async function natsMessages(): Promise<number> {
  if (!nats) return 0;
  const v = await nats.varz();
  return v.in_msgs + v.out_msgs;
}

/** What Postgres says of the bench's database: its open connections and the transactions committed so far. */
async function postgresSays(adminUrl: string, database: string): Promise<{ connections: number; commits: number }> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const { rows } = await c.query<{ connections: number; commits: string }>(
      `SELECT (SELECT count(*)::int FROM pg_stat_activity WHERE datname = $1) AS connections,
              (SELECT xact_commit::text FROM pg_stat_database WHERE datname = $1) AS commits`,
      [database],
    );
    return { connections: rows[0].connections, commits: Number(rows[0].commits) };
  } finally {
    await c.end();
  }
}

/** `PARALLEL` runs in flight through a round-robin balancer in front of `running`; every running instance's CPU counted. */
async function cpuPhase(label: string, running: (ServerProcess & { name: string })[], appKey: string, workerPgid: number, database: string): Promise<Phase> {
  const balancer = await roundRobin(running);
  try {
    const loop = serviceLoop({ url: balancer.url, appKey }, USER);
    const cpu = () => ({ worker: groupCpuMs(workerPgid), ...Object.fromEntries(running.map((s) => [s.name, pidCpuMs(s.child.pid!)])) });
    process.stdout.write(`  ${label}: ${PARALLEL} runs in flight through the balancer, ${WARM_SECONDS} s warm-up + ${SECONDS} s...\n`);
    // The commits counted over the whole phase (warm-up included: its runs are counted too), read again once the statistics are flushed.
    const pg0 = await postgresSays(POSTGRES_URL, database);
    const nats0 = await natsMessages();
    const notices0 = stepNotices;
    const t = await throughput(loop, { warmSeconds: WARM_SECONDS, seconds: SECONDS, parallel: PARALLEL, cpu });
    const pgAtEnd = await postgresSays(POSTGRES_URL, database);
    await new Promise((r) => setTimeout(r, 1_500));
    const pg1 = await postgresSays(POSTGRES_URL, database);
    const nats1 = await natsMessages();
    const notices1 = stepNotices;
    const perInstance = Object.fromEntries(running.map((s) => [s.name, t.cpuPerRun[s.name]]));
    const connections = Object.fromEntries(running.map((s) => [s.name, balancer.forwarded.get(Number(new URL(s.url).port)) ?? 0]));
    return {
      label,
      rps: t.perSecond,
      runs: t.runs,
      serverCpu: Object.values(perInstance).reduce((a, b) => a + b, 0),
      perInstance,
      workerCpu: t.cpuPerRun.worker,
      connections,
      loadMedian: percentile(t.samples, 50),
      loadP99: percentile(t.samples, 99),
      pgConnections: pgAtEnd.connections,
      pgCommitsPerRun: (pg1.commits - pg0.commits) / t.completed,
      natsMsgsPerRun: (nats1 - nats0) / t.completed,
      stepNoticesPerRun: (notices1 - notices0) / t.completed,
    };
  } finally {
    await balancer.close();
  }
}

/** One run at a time, `same` and `cross` alternating (which goes first alternates too). */
async function latency(same: Loop, cross: Loop): Promise<{ same: Samples; cross: Samples }> {
  for (let i = 0; i < WARMUP_RUNS; i++) {
    await warmUp(same);
    await warmUp(cross);
  }
  const s: Samples = [];
  const c: Samples = [];
  for (let i = 0; i < LATENCY_RUNS; i++) {
    if (i % 2 === 0) {
      await same(s);
      await cross(c);
    } else {
      await cross(c);
      await same(s);
    }
  }
  return { same: s, cross: c };
}

function table(phases: Phase[], rt: { same: Samples; cross: Samples }, idle: number[]): string {
  const f = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  const each = (r: Record<string, number>, d: number) => Object.values(r).map((n) => f(n, d)).join(" / ");
  const [one] = phases;
  const sameMed = percentile(rt.same, 50);
  const crossMed = percentile(rt.cross, 50);
  const sameP99 = percentile(rt.same, 99);
  const crossP99 = percentile(rt.cross, 99);
  const ratios = phases.map((p) => p.serverCpu / one.serverCpu);
  const line = (label: string, cell: (p: Phase, i: number) => string, extra: string[] = ["", "", ""]) => [label, ...phases.map(cell), ...extra];
  const rows: string[][] = [
    ["measure", ...phases.map((p) => `${Object.keys(p.perInstance).length} instance${Object.keys(p.perInstance).length === 1 ? "" : "s"}`), "ratio / added", "target", ""],
    line(`server CPU ms per run (all instances), ${PARALLEL} in flight`, (p) => f(p.serverCpu), [ratios.slice(1).map((r) => `${f(r)}×`).join(", "), `≤ ${TARGET.cpuRatio}×`, ratios.slice(1).every((r) => r <= TARGET.cpuRatio) ? "PASS" : "MISS"]),
    line(`  per instance, ms`, (p) => each(p.perInstance, 1)),
    line(`  runs/s`, (p) => f(p.rps, 0), [phases.slice(1).map((p) => `${f(p.rps / one.rps)}×`).join(", "), "", ""]),
    line(`  round trip under that load, median / p99, ms`, (p) => `${f(p.loadMedian)} / ${f(p.loadP99)}`),
    line(`  worker CPU ms per run`, (p) => f(p.workerCpu)),
    line(`  connections the balancer gave each instance`, (p) => each(p.connections, 0)),
    line(`  Postgres connections to the database (all instances)`, (p) => String(p.pgConnections), [phases.map((p) => f(p.pgConnections / Object.keys(p.perInstance).length, 1)).join(", ") + " per instance", "", ""]),
    line(`  Postgres transactions committed per run`, (p) => f(p.pgCommitsPerRun, 1)),
    line(`  stored steps Postgres announced per run (NOTIFY)`, (p) => f(p.stepNoticesPerRun, 1)),
    ...(nats ? [line(`  NATS messages per run (in + out)`, (p) => f(p.natsMsgsPerRun, 1))] : []),
    [`  idle, no run: CPU ms per second, each instance`, "", idle.map((n) => f(n, 1)).join(" / "), ...phases.slice(2).map(() => ""), "", "", ""],
    ["", "same instance", "other instance", ...phases.slice(2).map(() => ""), "", "", ""],
    [`tool round trip median, ms (app on A, run on W / all on W)`, f(sameMed), f(crossMed), ...phases.slice(2).map(() => ""), `+${f(crossMed - sameMed)}`, `≤ +${TARGET.addedMedianMs}`, crossMed - sameMed <= TARGET.addedMedianMs ? "PASS" : "MISS"],
    [`tool round trip p99, ms`, f(sameP99), f(crossP99), ...phases.slice(2).map(() => ""), `+${f(crossP99 - sameP99)}`, "", ""],
  ];
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => (row[i] ?? "").length)));
  return rows.map((row) => "  " + row.map((c, i) => (i >= 1 && i <= phases.length + 1 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ").trimEnd()).join("\n");
}

/** What to undo before leaving, in reverse order, also on Ctrl-C. */
const cleanups: (() => Promise<unknown>)[] = [];
let stopping: Promise<never> | null = null;
async function cleanUp(): Promise<void> {
  for (const fn of cleanups.splice(0).reverse()) await fn().catch((err: Error) => process.stderr.write(`clean-up: ${err.message}\n`));
}
function stop(code: number): Promise<never> {
  stopping ??= cleanUp().finally(() => process.exit(code)) as Promise<never>;
  return stopping;
}

async function main(): Promise<void> {
  const startedAt = performance.now();
  process.stdout.write(`bench:instances: a run = ${ROUND_TRIPS} tool round trips + a final answer; server instances as processes on one Postgres, a real svc-worker on instance W\n`);
  process.stdout.write(`machine: ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} at start (other processes on the machine skew the numbers)\n`);
  process.once("SIGINT", () => stop(130)).once("SIGTERM", () => stop(130));

  const scratch = await scratchPostgres(POSTGRES_URL);
  if ("error" in scratch) {
    process.stdout.write(`  postgres: SKIPPED, not reachable at ${POSTGRES_URL} (${scratch.error}); set SVC_BENCH_POSTGRES_URL to bench it.\n`);
    return;
  }
  cleanups.push(() => scratch.drop());
  cleanups.push(await listenForSteps(scratch.url));
  if (POOLER) {
    bouncer = await startPgBouncer({ poolSize: POOLER_SIZE, upstream: POSTGRES_URL });
    cleanups.push(() => bouncer!.stop());
    process.stdout.write(`  the instances' pools go through PgBouncer (transaction mode, ${POOLER_SIZE} server connections)\n`);
  }
  if (process.env.SVC_BENCH_BUS === "nats") {
    nats = await startNats();
    cleanups.push(() => nats!.stop());
    process.stdout.write(`  run events on the NATS run bus (${nats.url}, JetStream)\n`);
  }
  cleanups.push(async () => removeTempDirs());
  const model: Child = spawnNode(["--import", "tsx", "bench/model-standin.ts"]);
  cleanups.push(async () => model.stop());
  const modelUrl = (await model.waitFor(/^(http:\/\/\S+)$/m))[1];
  model.quiet();

  // W first: it migrates the database and prints the dev app; the worker is paired on it, so
  // its credentials name W and its connection is held there.
  const w = await instance(scratch.url, "W", true);
  // Stopped after the worker (an instance stopped while it marks a machine offline can hang).
  cleanups.push(() => Promise.all(servers.map((s) => s.stop("SIGTERM", 5000))));
  const keys = w.banner();
  if (!keys) throw new Error(`instance W printed no dev app:\n${w.output()}`);
  const home = await pairMachine({ url: w.url, appKey: keys.appKey, connectKey: keys.connectKey }, USER, { runtimes: { ollama: modelUrl, llamacpp: false, lmstudio: false, claude: false, codex: false } });
  const worker = spawnWorker(home);
  cleanups.push(async () => worker.stop());
  await worker.waitFor(/Connected/);
  worker.quiet();
  await pollUntil(async () => w.logs().some((l) => l.msg === "worker online"), (ok) => ok, 10_000, "the worker online on W");
  const workerPgid = worker.child.pid!;

  try {
    const database = new URL(scratch.url).pathname.slice(1);
    const one = await cpuPhase("1 instance (W)", [w], keys.appKey, workerPgid, database);
    process.stdout.write(`  starting instances A and C...\n`);
    const a = await instance(scratch.url, "A", false);
    const c = await instance(scratch.url, "C", false);
    // What an instance spends with no run at all (polls, sweeps, keep-alives): its fixed share.
    const idleFrom = [w, a, c].map((s) => pidCpuMs(s.child.pid!));
    await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
    const idle = [w, a, c].map((s, i) => (pidCpuMs(s.child.pid!) - idleFrom[i]) / IDLE_SECONDS);
    const three = await cpuPhase("3 instances (W, A, C)", [w, a, c], keys.appKey, workerPgid, database);
    process.stdout.write(`  starting instances D, E and F...\n`);
    const more = [await instance(scratch.url, "D", false), await instance(scratch.url, "E", false), await instance(scratch.url, "F", false)];
    const six = await cpuPhase("6 instances (W, A, C, D, E, F)", [w, a, c, ...more], keys.appKey, workerPgid, database);

    process.stdout.write(`  tool round trip, app on A vs on W (${WARMUP_RUNS} warm-up + ${LATENCY_RUNS} runs per side, alternating)...\n`);
    const rt = await latency(serviceLoop({ url: w.url, appKey: keys.appKey }, USER), serviceLoop({ url: a.url, appKey: keys.appKey }, USER));
    const claimed = Object.fromEntries([w, a, c].map((s) => [s.name, s.logs().filter((l) => l.msg === "run claimed").length]));

    process.stdout.write(`\n${table([one, three, six], rt, idle)}\n`);
    process.stdout.write(`  runs counted in the CPU windows: ${one.runs} (1 instance), ${three.runs} (3 instances), ${six.runs} (6 instances); runs claimed (driven) per instance: ${Object.entries(claimed).map(([k, v]) => `${k} ${v}`).join(", ")}\n`);
    process.stdout.write(`  ${rt.same.length} round trips per side; added = other instance − same instance, per percentile, measured interleaved. Total ${((performance.now() - startedAt) / 1000).toFixed(0)} s.\n`);
    const missed = three.serverCpu / one.serverCpu > TARGET.cpuRatio || six.serverCpu / one.serverCpu > TARGET.cpuRatio || percentile(rt.cross, 50) - percentile(rt.same, 50) > TARGET.addedMedianMs;
    process.exitCode = process.env.SVC_BENCH_STRICT === "1" && missed ? 1 : 0;
  } catch (err) {
    (err as Error).message += `\nthe worker: ${worker.describe()}`;
    throw err;
  }
}

try {
  await main();
} catch (err) {
  if (stopping) await stopping;
  process.stderr.write(`bench:instances failed: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
} finally {
  if (!stopping) await cleanUp();
}
