/**
 * `npm run bench:readers`: the memory a live run's readers that never read cost
 * the server (issue 31).
 *
 * The real server runs in this process (its memory is this process's), on
 * Postgres when reachable (PGlite's WebAssembly heap grows with every write and
 * would be counted too; `SVC_BENCH_DATABASE=pglite` to use it anyway). A run is
 * leased to this instance and written the way its driver writes it
 * (`RunStore.write`, then `RunBus.publish`), 50 events a statement of 1,000
 * bytes of text each, while N raw HTTP readers of its `/v1/runs/{id}/events`
 * take the answer's head and then never read (their sockets paused: the
 * kernel's buffers fill, then the server's sockets push back).
 *
 * Each scenario prints the peak RSS growth over the server before the readers
 * came (both after two full GCs; sampled every 20 ms while the run is written),
 * the same for heap + external, what stays after the readers are closed, and
 * how many readers the server closed as slow (past the 1 MiB a stream may hold).
 * Both scenarios run in one process, one after the other, on one server.
 *
 * Knobs: `SVC_BENCH_SCENARIOS` (`50x5,1000x1`: readers × MiB of run),
 * `SVC_BENCH_POSTGRES_URL`, `SVC_BENCH_DATABASE` (`postgres` | `pglite`).
 */
import net from "node:net";
import os from "node:os";
import v8 from "node:v8";
import { runInNewContext } from "node:vm";
import { Writable } from "node:stream";
import { parseConfig } from "../server/config.js";
import { createLogger } from "../server/logger.js";
import { startServer, type RunningServer } from "../server/server.js";
import type { DatabaseTarget } from "../server/db/open.js";
import type { StoredEvent } from "../server/runs/run-rows.js";
import { ensureEndUser } from "../server/users/end-users.js";
import { randomId } from "../server/crypto.js";
import { removeTempDirs, scratchPostgres, tempDir } from "./lib.js";

v8.setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const DELTA_BYTES = 1_000;
const BATCH = 50;
const TARGETS: Record<string, number> = { "50x5": 100, "1000x1": 300 };
const scenarios = (process.env.SVC_BENCH_SCENARIOS ?? "50x5,1000x1").split(",").map((s) => {
  const [readers, mib] = s.split("x").map(Number);
  return { name: s, readers, mib };
});
const MB = 1024 * 1024;
const mb = (n: number) => (n / MB).toFixed(1);

function memory() {
  gc();
  gc();
  const m = process.memoryUsage();
  return { rss: m.rss, js: m.heapUsed + m.external };
}

/** An HTTP/1.1 reader on its own socket that reads the answer's head, then nothing. */
function silentReader(url: string, path: string, key: string): Promise<net.Socket> {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  socket.on("error", () => {});
  socket.write([`GET ${path} HTTP/1.1`, `Host: ${hostname}:${port}`, `Authorization: Bearer ${key}`, "Connection: close", "", ""].join("\r\n"));
  return new Promise((resolve, reject) => {
    let head = "";
    const onData = (chunk: Buffer) => {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      socket.off("data", onData);
      socket.pause();
      if (!head.startsWith("HTTP/1.1 200")) return reject(new Error(`not a stream: ${head.slice(0, 80)}`));
      resolve(socket);
    };
    socket.on("data", onData);
    socket.once("close", () => reject(new Error("closed before its head")));
  });
}

interface Outcome {
  name: string;
  readers: number;
  runMiB: number;
  peakRss: number;
  peakJs: number;
  afterRss: number;
  afterJs: number;
  closedSlow: number;
  seconds: number;
}

async function scenario(server: RunningServer & { appKey: string; slowClosed: () => number }, readers: number, mib: number, name: string): Promise<Outcome> {
  const { runStore, runBus } = server.services;
  // The dev app, the only one on this fresh database.
  const [app] = await server.db.query<{ id: string }>(`SELECT id FROM apps ORDER BY created_at LIMIT 1`);
  const tenant = { appId: app.id, environment: "test" as const };
  const endUserId = await ensureEndUser(server.db, tenant, `reader-${name}`);
  const runId = randomId("run_", 24);
  await server.db.prisma.run.create({
    data: { id: runId, ...tenant, endUserId, source: "runs", model: "stand-in", request: { prompt: "a long answer" }, status: "running", leaseOwner: runStore.instance, leaseExpiresAt: new Date(Date.now() + 3_600_000) },
  });
  let seq = 0;
  const write = async (events: Omit<StoredEvent, "seq">[], patch?: Parameters<typeof runStore.write>[3]["patch"]) => {
    const stored = events.map((e) => ({ ...e, seq: ++seq }));
    if (!(await runStore.write(runId, endUserId, new Date(), { events: stored, patch }))) throw new Error("the run's write was refused");
    runBus.publish(runId, stored);
  };
  await write([{ kind: "run_started", data: { kind: "run_started", runId, route: "user-hardware", costClass: "user_hardware", machineId: null, runtime: "stand-in", model: "stand-in" } }]);

  const before = memory();
  const slow0 = server.slowClosed();
  const sockets: net.Socket[] = [];
  for (let i = 0; i < readers; i += 100) {
    sockets.push(...(await Promise.all(Array.from({ length: Math.min(100, readers - i) }, () => silentReader(server.url, `/v1/runs/${runId}/events`, server.appKey)))));
  }
  let peak = { rss: 0, js: 0 };
  const sample = setInterval(() => {
    const m = process.memoryUsage();
    peak = { rss: Math.max(peak.rss, m.rss), js: Math.max(peak.js, m.heapUsed + m.external) };
  }, 20);
  const t0 = performance.now();
  const text = "x".repeat(DELTA_BYTES - 10);
  const deltas = Math.round((mib * MB) / DELTA_BYTES);
  for (let d = 0; d < deltas; d += BATCH) {
    await write(Array.from({ length: Math.min(BATCH, deltas - d) }, (_, j) => ({ kind: "text_delta", data: { kind: "text_delta", turn: 1, text: `${String(d + j).padStart(9, "0")} ${text}` } })));
    // A driver writes as a machine's frames arrive: the sockets get their turn between writes.
    await new Promise((r) => setImmediate(r));
  }
  await write([{ kind: "run_completed", data: { kind: "run_completed", output: "(long)", usage: { inputTokens: 1, outputTokens: deltas, costClass: "user_hardware", amountMicros: 0 }, stopReason: "stop" } }], { status: "completed", output: "(long)", finished: true });
  const seconds = (performance.now() - t0) / 1000;
  await new Promise((r) => setTimeout(r, 1_000));
  clearInterval(sample);
  const closedSlow = server.slowClosed() - slow0;
  for (const s of sockets) s.destroy();
  await new Promise((r) => setTimeout(r, 500));
  const after = memory();
  return { name, readers, runMiB: mib, peakRss: peak.rss - before.rss, peakJs: peak.js - before.js, afterRss: after.rss - before.rss, afterJs: after.js - before.js, closedSlow, seconds };
}

async function main() {
  const wanted = process.env.SVC_BENCH_DATABASE ?? "postgres";
  let database: DatabaseTarget = { kind: "pglite", dataDir: null };
  let drop: (() => Promise<void>) | null = null;
  let dbName = "pglite";
  if (wanted === "postgres") {
    const scratch = await scratchPostgres(process.env.SVC_BENCH_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
    if ("error" in scratch) console.log(`  postgres unreachable (${scratch.error}): on PGlite`);
    else {
      database = { kind: "postgres", url: scratch.url };
      drop = scratch.drop;
      dbName = "postgres";
    }
  }
  let slow = 0;
  const sink = new Writable({
    write: (chunk: Buffer, _enc, cb) => {
      if (chunk.includes("closed a slow reader")) slow++;
      cb();
    },
  });
  const config = parseConfig({ PORT: "0", SVC_DATA_DIR: tempDir("svc-bench-"), LOG_LEVEL: "info", SVC_DEV_APP: "1", MAX_STREAMS_PER_APP: "100000" });
  const printed: string[] = [];
  const server = await startServer({ config, logger: createLogger(config.logLevel, sink), database, print: (t) => printed.push(t) });
  const appKey = /app key\s+(\S+)/.exec(printed.join(""))?.[1] ?? "";
  const results: Outcome[] = [];
  try {
    console.log(`bench:readers on ${dbName}, Node ${process.version}, ${os.cpus().length} cores, load ${os.loadavg()[0].toFixed(2)}`);
    for (const s of scenarios) {
      process.stdout.write(`  ${s.readers} readers that never read a live ${s.mib} MiB run...\n`);
      results.push(await scenario({ ...server, appKey, slowClosed: () => slow }, s.readers, s.mib, s.name));
    }
  } finally {
    await server.close();
    await drop?.();
    removeTempDirs();
  }
  const rows = [["scenario", "peak RSS growth", "target", "", "peak heap+external", "after closing (RSS / JS)", "closed as slow", "run written in"]];
  for (const r of results) {
    const target = TARGETS[r.name];
    rows.push([
      `${r.readers} readers × ${r.runMiB} MiB run`,
      `${mb(r.peakRss)} MB`,
      target ? `< ${target} MB` : "",
      target ? (r.peakRss / MB < target ? "PASS" : "MISS") : "",
      `${mb(r.peakJs)} MB`,
      `${mb(r.afterRss)} / ${mb(r.afterJs)} MB`,
      `${r.closedSlow} of ${r.readers}`,
      `${r.seconds.toFixed(1)} s`,
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  console.log(rows.map((row) => "  " + row.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd()).join("\n"));
  console.log(`  load average after: ${os.loadavg()[0].toFixed(2)}`);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
