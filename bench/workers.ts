/**
 * The idle cost of connected machines: one instance holding N paired machines'
 * worker connections that only heartbeat.
 *
 *   npm run bench:workers         (node --conditions=svc-source --import tsx bench/workers.ts)
 *
 * The real server runs in this process (as bench/lib.ts starts it, on a fixed port
 * so it can be restarted on it). N machines are paired for end users the API made
 * (`POST /v1/end_users/session`): one machine through the whole device flow, the
 * rest as the rows that flow writes (the same columns, a real pairing token each,
 * only its hash stored), in one statement. Their connections are opened from
 * child processes (bench/workers-client.ts, N split between them), speaking the
 * real protocol: hello, welcome, a heartbeat every interval the welcome tells (the
 * server's default: 45 s timeout, a beat every 10 s), the worker's reconnect backoff.
 *
 * Measured, once all N are welcomed and a heartbeat interval has passed:
 *  - memory per idle connection: this process's RSS and JS memory (heap + external,
 *    after a full GC) with the N connected, less before they connected, ÷ N;
 *  - the server's CPU over a window (this process; the clients are elsewhere);
 *  - database writes per second over the same window: every statement that wrote
 *    (INSERT, UPDATE, DELETE on any table, counted by a statement-level trigger
 *    on each table, on the real database, a sequence per table);
 *  - reconnect after a restart: the server closed, a new one started on the same
 *    port and database, the time until all N are welcomed again.
 *
 * The floor, first: the same N connections, from the same client processes, to a bare `ws`
 * server in this process that only answers `hello` with a `welcome` (the same heartbeat
 * interval) and parses each frame: what the frames alone cost this process, with no
 * service behind them. Its CPU over the same window is the lowest any server could spend
 * on this machine for this traffic (SVC_BENCH_FLOOR=0 skips it).
 *
 * Knobs: SVC_BENCH_MACHINES (10000), SVC_BENCH_SECONDS (idle window, 20),
 * SVC_BENCH_CLIENTS (client processes, 4), SVC_BENCH_DATABASES (pglite,postgres),
 * SVC_BENCH_POSTGRES_URL (admin URL; a scratch database is created and dropped),
 * SVC_BENCH_STRICT=1 (exit code 1 on a miss), SVC_BENCH_PROFILE=<dir> (a CPU profile of the
 * server's idle window, per database). Needs N + a few hundred file
 * descriptors in this process (`ulimit -n`); it says so if the limit is lower.
 */
import fs from "node:fs";
import http from "node:http";
import inspector from "node:inspector";
import os from "node:os";
import path from "node:path";
import v8 from "node:v8";
import vm from "node:vm";
import { performance } from "node:perf_hooks";
import { Writable } from "node:stream";
import { parseConfig } from "../server/config.js";
import { createLogger } from "../server/logger.js";
import { startServer, type RunningServer } from "../server/server.js";
import type { DatabaseTarget } from "../server/db/open.js";
import { hashSecret, randomId } from "../server/crypto.js";
import { newPairingToken } from "../server/pairing/codes.js";
import { heartbeatSecondsFor } from "../server/workers/connection.js";
import { pairInto } from "../test/helpers/pair-via-api.js";
import { WebSocketServer } from "ws";
import { WORKER_CONNECT_PATH, WORKER_PROTOCOL_VERSION } from "@svc/contract";
import { ownCpuMs, removeTempDirs, scratchPostgres, spawnNode, tempDir, type Child } from "./lib.js";

const MACHINES = Number(process.env.SVC_BENCH_MACHINES ?? 10_000);
const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 20);
const CLIENTS = Number(process.env.SVC_BENCH_CLIENTS ?? 4);
const USERS = Math.max(1, Math.min(100, Math.ceil(MACHINES / 100)));
const DATABASES = (process.env.SVC_BENCH_DATABASES ?? "pglite,postgres").split(",");
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const TARGET = { bytesPerConnection: 50 * 1024, cpuPercent: 5, writesPerSecond: 50, rowsPerSecond: 50, cpuOverFloor: 1.5 };
/** All N connected, or the bench fails. */
const CONNECT_TIMEOUT_MS = 600_000;

const gc: () => void = (() => {
  v8.setFlagsFromString("--expose-gc");
  return vm.runInNewContext("gc") as () => void;
})();

// ---------------------------------------------------------------- the server

interface Server extends RunningServer {
  heartbeatTimeoutSeconds: number;
  appKey: string;
  connectKey: string;
}

async function start(target: DatabaseTarget, dataDir: string, port: number): Promise<Server> {
  const sink = new Writable({ write: (_chunk, _enc, cb) => cb() });
  const config = parseConfig({ PORT: String(port), SVC_DATA_DIR: dataDir, LOG_LEVEL: process.env.SVC_BENCH_LOG_LEVEL ?? "info", SVC_DEV_APP: "1" });
  const printed: string[] = [];
  const server = await startServer({ config, logger: createLogger(config.logLevel, sink), database: target, print: (t) => printed.push(t) });
  const banner = printed.join("");
  const field = (label: string) => new RegExp(`${label}\\s+(\\S+)`).exec(banner)?.[1] ?? "";
  return { ...server, heartbeatTimeoutSeconds: config.workerHeartbeatTimeoutSeconds, appKey: field("app key"), connectKey: field("connect key") };
}

/** N paired machines: one through the device flow, the rest as the rows it writes. Returns every pairing token. */
async function pairMachines(server: Server): Promise<string[]> {
  const users: string[] = [];
  for (let i = 0; i < USERS; i++) users.push(`bench-user-${i}`);
  // The end users, made by the API (a session for each).
  for (const user of users) {
    const res = await fetch(`${server.url}/v1/end_users/session`, { method: "POST", headers: { authorization: `Bearer ${server.appKey}`, "content-type": "application/json" }, body: JSON.stringify({ user }) });
    if (res.status !== 200) throw new Error(`session for ${user}: ${res.status} ${await res.text()}`);
  }
  const first = await pairInto(tempDir("svc-bench-worker-"), { url: server.url }, server, users[0], {}, "bench-machine-0");
  const owners = await server.db.query<{ id: string; app_id: string; environment: string }>(
    `SELECT id, app_id, environment::text AS environment FROM end_users WHERE external_id = ANY($1::text[]) ORDER BY external_id`,
    [users],
  );
  const tokens = [first.token];
  const rows: { id: string; user: string; hash: string; host: string }[] = [];
  for (let i = 1; i < MACHINES; i++) {
    const token = newPairingToken();
    tokens.push(token);
    rows.push({ id: randomId("mch_", 20), user: owners[i % owners.length].id, hash: hashSecret(token), host: `bench-machine-${i}` });
  }
  for (let i = 0; i < rows.length; i += 5000) {
    const part = rows.slice(i, i + 5000);
    await server.db.query(
      `INSERT INTO machines (id, app_id, environment, end_user_id, token_hash, hostname, platform, arch, client, client_version, created_at)
       SELECT r.id, u.app_id, u.environment, u.id, r.hash, r.host, 'linux', 'x64', 'svc-worker', 'bench', now()
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS r(id, end_user_id, hash, host) JOIN end_users u ON u.id = r.end_user_id`,
      [part.map((r) => r.id), part.map((r) => r.user), part.map((r) => r.hash), part.map((r) => r.host)],
    );
  }
  return tokens;
}

/**
 * Triggers on every table counting what writes to it: a statement-level one the
 * statements, a row-level one the rows (a sequence each per table, so the count
 * itself takes no lock). Keys: `<table>` for statements, `<table> rows` for rows.
 */
async function countWrites(server: Server): Promise<() => Promise<Map<string, number>>> {
  const tables = (await server.db.query<{ t: string }>(`SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE '\\_prisma%'`)).map((r) => r.t);
  for (const t of tables) await server.db.exec(`CREATE SEQUENCE IF NOT EXISTS "bench_w_${t}" MINVALUE 0 START 0; CREATE SEQUENCE IF NOT EXISTS "bench_r_${t}" MINVALUE 0 START 0`);
  await server.db.exec(`CREATE OR REPLACE FUNCTION bench_count_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval(quote_ident('bench_w_' || TG_TABLE_NAME)); RETURN NULL; END $$`);
  await server.db.exec(`CREATE OR REPLACE FUNCTION bench_count_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval(quote_ident('bench_r_' || TG_TABLE_NAME)); RETURN NULL; END $$`);
  for (const t of tables) {
    await server.db.exec(`CREATE TRIGGER bench_count_write AFTER INSERT OR UPDATE OR DELETE ON "${t}" FOR EACH STATEMENT EXECUTE FUNCTION bench_count_write()`);
    await server.db.exec(`CREATE TRIGGER bench_count_row AFTER INSERT OR UPDATE OR DELETE ON "${t}" FOR EACH ROW EXECUTE FUNCTION bench_count_row()`);
  }
  const count = async (seq: string) => {
    const [r] = await server.db.query<{ n: string; called: boolean }>(`SELECT last_value AS n, is_called AS called FROM "${seq}"`);
    return r.called ? Number(r.n) + 1 : 0;
  };
  return async () => {
    const counts = new Map<string, number>();
    for (const t of tables) {
      counts.set(t, await count(`bench_w_${t}`));
      counts.set(`${t} rows`, await count(`bench_r_${t}`));
    }
    return counts;
  };
}

// ---------------------------------------------------------------- the clients

class Clients {
  readonly children: Child[] = [];
  private readonly counts: number[] = [];
  private readonly refused: number[] = [];

  constructor(url: string, tokens: string[]) {
    const dir = tempDir("svc-bench-tokens-");
    const per = Math.ceil(tokens.length / CLIENTS);
    for (let i = 0; i < CLIENTS; i++) {
      const file = path.join(dir, `tokens-${i}`);
      fs.writeFileSync(file, tokens.slice(i * per, (i + 1) * per).join("\n"));
      const child = spawnNode(["--conditions=svc-source", "--import", "tsx", "bench/workers-client.ts", url, file]);
      this.counts.push(0);
      this.refused.push(0);
      child.child.stdout!.on("data", (chunk: Buffer) => {
        const all = [...chunk.toString().matchAll(/connected (\d+) refused (\d+)/g)];
        const last = all.at(-1);
        if (last) (this.counts[i] = Number(last[1])), (this.refused[i] = Number(last[2]));
      });
      child.quiet();
      this.children.push(child);
    }
  }

  get connected(): number {
    return this.counts.reduce((a, b) => a + b, 0);
  }

  /** Resolves once `n` connections are welcomed at once (ms it took). */
  async until(n: number, what: string): Promise<number> {
    const from = performance.now();
    let shown = performance.now();
    while (this.connected < n) {
      const dead = this.children.find((c) => c.child.exitCode !== null);
      if (dead) throw new Error(`a client process ended: ${dead.describe()}`);
      if (this.refused.some((r) => r > 0)) throw new Error(`${this.refused.reduce((a, b) => a + b, 0)} connections were refused (4001)`);
      if (performance.now() - from > CONNECT_TIMEOUT_MS) throw new Error(`${what}: only ${this.connected} of ${n} connected after ${CONNECT_TIMEOUT_MS / 1000} s`);
      if (performance.now() - shown > 10_000) {
        shown = performance.now();
        process.stdout.write(`    ${what}: ${this.connected} / ${n} after ${((shown - from) / 1000).toFixed(0)} s\n`);
      }
      await sleep(20);
    }
    return performance.now() - from;
  }

  stop(): void {
    for (const c of this.children) c.stop();
  }
}

// ---------------------------------------------------------------- measuring

interface Result {
  db: string;
  connectMs: number;
  rssPerConn: number;
  jsPerConn: number;
  heapPerConn: number;
  cpuPercent: number;
  baseCpuPercent: number;
  writesPerSecond: number;
  writesByTable: [string, number][];
  rowsPerSecond: number;
  rowsByTable: [string, number][];
  restartMs: number;
  closeMs: number;
}

function memory() {
  gc();
  gc();
  const m = process.memoryUsage();
  return { rss: m.rss, heap: m.heapUsed, js: m.heapUsed + m.external };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * SVC_BENCH_PROFILE=<dir>: a CPU profile of this process over the idle window only
 * (`<dir>/workers-<db>.cpuprofile`, for Chrome's DevTools); the returned function ends it.
 */
async function profileWindow(db: string): Promise<() => Promise<void>> {
  const dir = process.env.SVC_BENCH_PROFILE;
  if (!dir) return async () => {};
  const session = new inspector.Session();
  session.connect();
  const post = (method: string) => new Promise<unknown>((resolve, reject) => session.post(method, (err, r) => (err ? reject(err) : resolve(r))));
  await post("Profiler.enable");
  await post("Profiler.start");
  return async () => {
    const { profile } = (await post("Profiler.stop")) as { profile: unknown };
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, `workers-${db}.cpuprofile`), JSON.stringify(profile));
    session.disconnect();
  };
}

async function benchOn(db: string, target: DatabaseTarget): Promise<Result> {
  const dataDir = tempDir("svc-bench-");
  let server: Server | null = await start(target, dataDir, 0);
  let clients: Clients | null = null;
  try {
    const port = Number(new URL(server.url).port);
    process.stdout.write(`  ${db}: pairing ${MACHINES} machines...\n`);
    const tokens = await pairMachines(server);
    const writes = await countWrites(server);
    const heartbeatSeconds = heartbeatSecondsFor(server.heartbeatTimeoutSeconds * 1000);
    await sleep(1000);
    // The server's own idle cost with no machine connected (its sweeps), for comparison.
    const idle0 = ownCpuMs();
    const i0 = performance.now();
    await sleep(Math.min(10, SECONDS) * 1000);
    const baseCpuPercent = ((ownCpuMs() - idle0) / (performance.now() - i0)) * 100;
    const before = memory();

    process.stdout.write(`  ${db}: connecting ${MACHINES} machines from ${CLIENTS} processes...\n`);
    clients = new Clients(server.url, tokens);
    const connectMs = await clients.until(MACHINES, "connecting");
    // Every machine beats once at least before anything is measured.
    await sleep((heartbeatSeconds + 2) * 1000);
    const after = memory();

    process.stdout.write(`  ${db}: idle for ${SECONDS} s (a heartbeat every ${heartbeatSeconds} s per machine)...\n`);
    const w0 = await writes();
    const profile = await profileWindow(db);
    const cpu0 = ownCpuMs();
    const t0 = performance.now();
    await sleep(SECONDS * 1000);
    const cpu1 = ownCpuMs();
    await profile();
    const t1 = performance.now();
    const w1 = await writes();
    const seconds = (t1 - t0) / 1000;
    const perSecond = [...w1].map(([t, n]) => [t, (n - (w0.get(t) ?? 0)) / seconds] as [string, number]).filter(([, n]) => n > 0);
    const byTable = perSecond.filter(([t]) => !t.endsWith(" rows"));
    const rowsByTable = perSecond.filter(([t]) => t.endsWith(" rows")).map(([t, n]) => [t.slice(0, -" rows".length), n] as [string, number]);
    if (clients.connected !== MACHINES) throw new Error(`only ${clients.connected} of ${MACHINES} stayed connected through the idle window`);

    process.stdout.write(`  ${db}: restarting the server...\n`);
    const r0 = performance.now();
    await server.close();
    server = null;
    const closeMs = performance.now() - r0;
    process.stdout.write(`    closed in ${(closeMs / 1000).toFixed(1)} s; starting again on port ${port}...\n`);
    server = await start(target, dataDir, port);
    const restartMs = (await clients.until(MACHINES, "reconnecting")) + closeMs;
    return {
      db,
      connectMs,
      rssPerConn: (after.rss - before.rss) / MACHINES,
      jsPerConn: (after.js - before.js) / MACHINES,
      heapPerConn: (after.heap - before.heap) / MACHINES,
      cpuPercent: ((cpu1 - cpu0) / (t1 - t0)) * 100,
      baseCpuPercent,
      writesPerSecond: byTable.reduce((a, [, n]) => a + n, 0),
      writesByTable: byTable.sort((a, b) => b[1] - a[1]),
      rowsPerSecond: rowsByTable.reduce((a, [, n]) => a + n, 0),
      rowsByTable: rowsByTable.sort((a, b) => b[1] - a[1]),
      restartMs,
      closeMs,
    };
  } finally {
    clients?.stop();
    await server?.close();
  }
}

/**
 * The floor: the same clients against a bare `ws` server here that parses each frame and
 * answers `hello` with `welcome`, nothing else. Returns its CPU at idle, % of a core.
 */
async function bareFloor(): Promise<number> {
  const heartbeatSeconds = heartbeatSecondsFor(parseConfig({}).workerHeartbeatTimeoutSeconds * 1000);
  const welcome = JSON.stringify({ v: WORKER_PROTOCOL_VERSION, type: "welcome", payload: { heartbeatSeconds } });
  const server = http.createServer((_req, res) => res.writeHead(404).end());
  const wss = new WebSocketServer({ server, path: WORKER_CONNECT_PATH });
  wss.on("connection", (ws) => {
    ws.on("message", (data: Buffer) => {
      if ((JSON.parse(data.toString("utf8")) as { type: string }).type === "hello") ws.send(welcome);
    });
    ws.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const clients = new Clients(url, Array.from({ length: MACHINES }, (_, i) => `bare-${i}`));
  try {
    process.stdout.write(`  floor: connecting ${MACHINES} machines to a bare ws server...\n`);
    await clients.until(MACHINES, "connecting");
    await sleep((heartbeatSeconds + 2) * 1000);
    process.stdout.write(`  floor: idle for ${SECONDS} s...\n`);
    const cpu0 = ownCpuMs();
    const t0 = performance.now();
    await sleep(SECONDS * 1000);
    return ((ownCpuMs() - cpu0) / (performance.now() - t0)) * 100;
  } finally {
    clients.stop();
    for (const ws of wss.clients) ws.terminate();
    await new Promise((r) => (wss.close(), server.close(r)));
  }
}

// ---------------------------------------------------------------- report

function table(results: Result[], floorCpu: number | null): string {
  const kb = (b: number) => `${(b / 1024).toFixed(1)} KB`;
  const verdict = (ok: boolean) => (ok ? "PASS" : "MISS");
  const rows: string[][] = [["database", "measure", "value", "target", ""]];
  for (const r of results) {
    const perConn = Math.max(r.rssPerConn, r.jsPerConn);
    rows.push(
      [r.db, `memory per idle connection: RSS / JS (heap+external) / heap`, `${kb(r.rssPerConn)} / ${kb(r.jsPerConn)} / ${kb(r.heapPerConn)}`, "≤ 50 KB", verdict(perConn <= TARGET.bytesPerConnection)],
      [r.db, "server CPU at idle, % of a core", r.cpuPercent.toFixed(1), `≤ ${TARGET.cpuPercent}`, verdict(r.cpuPercent <= TARGET.cpuPercent)],
      [r.db, "  of which the server with no machine connected", r.baseCpuPercent.toFixed(1), "", ""],
      ...(floorCpu === null ? [] : [[r.db, `  the floor: a bare ws server, the same frames; the server ÷ the floor`, `${floorCpu.toFixed(1)}; ${(r.cpuPercent / floorCpu).toFixed(2)}×`, `≤ ${TARGET.cpuOverFloor}×`, verdict(r.cpuPercent / floorCpu <= TARGET.cpuOverFloor)]]),
      [r.db, "database writes per second at idle (statements)", r.writesPerSecond.toFixed(1), `≤ ${TARGET.writesPerSecond}`, verdict(r.writesPerSecond <= TARGET.writesPerSecond)],
      [r.db, "  by table", r.writesByTable.map(([t, n]) => `${t} ${n.toFixed(1)}`).join(", ") || "none", "", ""],
      [r.db, "rows written per second at idle", r.rowsPerSecond.toFixed(1), `≤ ${TARGET.rowsPerSecond}`, verdict(r.rowsPerSecond <= TARGET.rowsPerSecond)],
      [r.db, "  by table", r.rowsByTable.map(([t, n]) => `${t} ${n.toFixed(1)}`).join(", ") || "none", "", ""],
      [r.db, `all ${MACHINES} connected at first, s`, (r.connectMs / 1000).toFixed(1), "", ""],
      [r.db, `all ${MACHINES} back after a restart, s (of which closing)`, `${(r.restartMs / 1000).toFixed(1)} (${(r.closeMs / 1000).toFixed(1)})`, "", ""],
    );
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  return rows.map((row) => "  " + row.map((c, i) => (i === 2 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ").trimEnd()).join("\n");
}

function missed(r: Result): boolean {
  return Math.max(r.rssPerConn, r.jsPerConn) > TARGET.bytesPerConnection || r.cpuPercent > TARGET.cpuPercent || r.writesPerSecond > TARGET.writesPerSecond || r.rowsPerSecond > TARGET.rowsPerSecond;
}

/** What to undo before leaving, also on Ctrl-C. */
const cleanups = new Set<() => Promise<void>>();

async function main() {
  const startedAt = performance.now();
  process.stdout.write(`bench:workers: ${MACHINES} paired machines connected to one instance, idle (heartbeats only)\n`);
  process.stdout.write(`machine: ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} at start (other processes on the machine skew the numbers)\n`);
  const limit = fdLimit();
  if (limit !== null && limit < MACHINES + 512) process.stdout.write(`  warning: this process may open ${limit} files (ulimit -n); ${MACHINES} connections need about ${MACHINES + 512}. Raise it: ulimit -n ${MACHINES + 1024}\n`);
  process.once("SIGINT", () => void stop(130)).once("SIGTERM", () => void stop(130));
  const results: Result[] = [];
  const skipped: string[] = [];
  let floorCpu: number | null = null;
  try {
    if (process.env.SVC_BENCH_FLOOR !== "0") floorCpu = await bareFloor();
    for (const db of DATABASES) {
      if (db === "pglite") results.push(await benchOn("pglite", { kind: "pglite", dataDir: path.join(tempDir("svc-bench-pglite-"), "db") }));
      else if (db === "postgres") {
        const scratch = await scratchPostgres(POSTGRES_URL);
        if ("error" in scratch) {
          skipped.push(`  postgres: SKIPPED, not reachable at ${POSTGRES_URL} (${scratch.error}); set SVC_BENCH_POSTGRES_URL to bench it.`);
          continue;
        }
        const drop = () => scratch.drop().catch((err) => void process.stderr.write(`could not drop the scratch database: ${(err as Error).message}\n`));
        cleanups.add(drop);
        try {
          results.push(await benchOn("postgres", { kind: "postgres", url: scratch.url }));
        } finally {
          cleanups.delete(drop);
          await drop();
        }
      } else throw new Error(`unknown database ${db} in SVC_BENCH_DATABASES`);
    }
  } finally {
    removeTempDirs();
  }
  process.stdout.write(`\n${table(results, floorCpu)}\n`);
  for (const line of skipped) process.stdout.write(`${line}\n`);
  process.stdout.write(`  memory: this process with the N connected (after a heartbeat interval, full GC) less before, ÷ N; the verdict takes the larger of RSS and JS. Total ${((performance.now() - startedAt) / 1000).toFixed(0)} s.\n`);
  process.exitCode = process.env.SVC_BENCH_STRICT === "1" && results.some(missed) ? 1 : 0;
}

function fdLimit(): number | null {
  try {
    const m = /Max open files\s+(\d+)/.exec(fs.readFileSync("/proc/self/limits", "utf8"));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

let stopping: Promise<void> | null = null;
function stop(code: number): Promise<void> {
  stopping ??= Promise.all([...cleanups].map((fn) => fn())).then(() => process.exit(code));
  return stopping;
}

await main();
