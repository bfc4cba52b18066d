/**
 * Chat completions through the service against what they would cost without it.
 *
 *   npm run bench:chat            (node --conditions=svc-source --import tsx bench/chat.ts)
 *
 * The servers run in this process (the service as the tests start it, a raw
 * `node:http` hello server, a bare Express JSON echo); a real `svc-worker start`
 * process is paired through the API; the model runtime is a stand-in in a process
 * of its own (bench/chat-standin.ts, OpenAI-compatible: `instant` answers at once,
 * `paced64` streams 64 chunks 20 ms apart). Throughput and the concurrent streams
 * are driven by a load client in another process (bench/chat-load.ts); the
 * one-at-a-time measures by this process. All with the same `node:http` client
 * (bench/chat-client.ts).
 *
 *  1. `svc/echo` through the whole path (auth, routing, run record, ledger row)
 *     against the hello server and the Express echo: requests/s with a fixed
 *     number in flight on keep-alive connections, the same client, body and window.
 *  2. A non-streamed completion routed to the worker's runtime against the same
 *     request to the runtime directly: one at a time, alternating.
 *  3. Streamed, 64 chunks 20 ms apart: time to first token through the service
 *     against directly (one at a time, alternating); then 1,000 streams at once
 *     through the service (and, as a reference, directly).
 *  4. Scenario 1 on embedded PGlite and on Postgres.
 *
 * Scenarios 2 and 3 also measure the floor: the same path through bare relays (bench/floor-relay.ts:
 * a relay in this process and a bare worker process, the same hops with nothing done at them),
 * in turn with the other two; what it adds is the least any service on this path could add here.
 *
 * Options (environment): SVC_BENCH_SECONDS (window of 1 and 4, default 5),
 * SVC_BENCH_CONCURRENCY (in flight in 1 and 4, default 64), SVC_BENCH_REQUESTS
 * (scenario 2, per path, default 300), SVC_BENCH_TTFT_STREAMS (scenario 3, per path,
 * default 12), SVC_BENCH_STREAMS (default 1000), SVC_BENCH_CHAT_DATABASE (where 2
 * and 3 run: pglite or postgres, default pglite), SVC_BENCH_SCENARIOS (default 1,2,3;
 * 4 comes with 1), SVC_BENCH_POSTGRES_URL (admin URL,
 * default postgres://postgres@127.0.0.1:5432/postgres; a scratch database is created
 * and dropped), SVC_BENCH_HISTORY (finished runs of another app written into the database of 2 and 3
 * and analysed before they run, as a deployment's database is after a while, default 20000; 0: a fresh
 * database, as every measure before 2026-11-28's seventh part), SVC_BENCH_STRICT=1 (exit code 1 on a miss),
 * SVC_BENCH_PROFILE_WINDOWS=1 (each 1,000-stream part prints its window in the clock of a
 * `node --cpu-prof` profile of this process, to read that part alone).
 */
import http from "node:http";
import os from "node:os";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import express from "express";
import { post, stream, type StreamResult } from "./chat-client.js";
import { startFloorRelay, startFloorWorker } from "./floor-relay.js";
import { ownCpuMs, pairMachine, percentile, removeTempDirs, scratchPostgres, seedHistory, spawnNode, spawnWorker, startBenchServer, type BenchServer, type Child } from "./lib.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 5);
const CONCURRENCY = Number(process.env.SVC_BENCH_CONCURRENCY ?? 64);
const REQUESTS = Number(process.env.SVC_BENCH_REQUESTS ?? 300);
const WARMUP_REQUESTS = 50;
const TTFT_STREAMS = Number(process.env.SVC_BENCH_TTFT_STREAMS ?? 12);
const STREAMS = Number(process.env.SVC_BENCH_STREAMS ?? 1000);
const HISTORY_RUNS = Number(process.env.SVC_BENCH_HISTORY ?? 20_000);
const SCENARIOS = new Set((process.env.SVC_BENCH_SCENARIOS ?? "1,2,3").split(","));
const CHAT_DATABASE = process.env.SVC_BENCH_CHAT_DATABASE ?? "pglite";
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
/** The 1,000 streams must all end within this, or the ones left count as not completed. */
const STREAMS_TIMEOUT_MS = 60_000;

/** A completed stream whose largest chunk gap is under this came in one burst (its chunks were held back, then sent together). */
const BURST_MS = 10;

const TARGET = {
  echoVsHello: 0.1,
  echoVsExpress: 0.6,
  addedMedianMs: 0.5,
  addedP99Ms: 2,
  ttftAddedMedianMs: 0.5,
  /** A stream "stalls" when two of its consecutive content chunks are further apart than this (they are sent 20 ms apart). */
  stallMs: 1000,
  pgliteVsPostgres: 0.7,
};

const USER = "bench-user";
const RUNTIME = "openai-compatible:standin";
const CHUNKS = 64;
/** The text of a `paced64` answer (bench/chat-standin.ts: `tok0 ` to `tok63 `), in characters. */
const PACED_CHARS = Array.from({ length: CHUNKS }, (_, i) => `tok${i} `).join("").length;

const f = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : "-");
const say = (t: string) => process.stdout.write(`${t}\n`);

// ---------------------------------------------------------------- the baselines of scenario 1

/** The raw `node:http` hello server and the bare Express JSON echo, in this process like the service. */
async function startBaselines() {
  const hello = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/plain", "content-length": "12" });
      res.end("Hello world\n");
    });
  });
  const app = express();
  app.use(express.json());
  app.post("/echo", (req, res) => {
    res.json(req.body);
  });
  const bare = http.createServer(app);
  const listen = (s: http.Server) => new Promise<string>((r) => s.listen(0, "127.0.0.1", () => r(`http://127.0.0.1:${(s.address() as AddressInfo).port}`)));
  const helloUrl = await listen(hello);
  const expressUrl = await listen(bare);
  const close = (s: http.Server) => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r())));
  return { helloUrl: `${helloUrl}/`, expressUrl: `${expressUrl}/echo`, close: () => Promise.all([close(hello), close(bare)]).then(() => {}) };
}

// ---------------------------------------------------------------- the load client (another process)

interface RpsResult {
  counted: number;
  perSecond: number;
  total: number;
  errors: number;
  firstError: string;
  statuses: Record<string, number>;
  median: number;
  p99: number;
  clientCpuMs: number;
  /** CPU ms of this process (the servers) per request, warm-up included. */
  serverCpuUs: number;
}

async function runLoad<T>(spec: Record<string, unknown>, timeoutMs: number): Promise<T> {
  const child = spawnNode(["--import", "tsx", "bench/chat-load.ts", JSON.stringify(spec)]);
  try {
    const m = await child.waitFor(/^RESULT (.*)\n/m, timeoutMs);
    return JSON.parse(m[1]) as T;
  } finally {
    child.stop();
  }
}

async function rps(label: string, url: string, headers: Record<string, string>, body: string): Promise<RpsResult> {
  process.stdout.write(`  ${label}: ${CONCURRENCY} in flight, 1 s warm-up + ${SECONDS} s...\n`);
  const cpu0 = ownCpuMs();
  const r = await runLoad<Omit<RpsResult, "serverCpuUs">>({ mode: "rps", url, headers, body, concurrency: CONCURRENCY, warmSeconds: 1, seconds: SECONDS }, (SECONDS + 30) * 1000);
  const cpu = ownCpuMs() - cpu0;
  const ok = r.statuses["200"] ?? 0;
  if (ok < r.counted || r.errors) throw new Error(`${label}: ${r.counted - ok} of ${r.counted} requests not 200, ${r.errors} errors; first: ${r.firstError}`);
  return { ...r, serverCpuUs: (cpu / r.total) * 1000 };
}

// ---------------------------------------------------------------- one at a time

const json = { "content-type": "application/json" };
/** Every service request differs: an identical chat request within 10 s is taken as a retry of the same run. */
let nonce = 0;
const ask = (what: string) => [{ role: "user", content: `${what} #${++nonce} ${Date.now()}` }];

/** Scenario 2: non-streamed, the runtime directly, through the bare relays (the floor) and through the service, in turn. */
async function routedLatency(server: BenchServer, standin: string, floorUrl: string) {
  const agentDirect = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const agentService = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const agentFloor = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const auth = { ...json, authorization: `Bearer ${server.appKey}` };
  const expected = "Hello from the stand-in model.";
  const direct = async () => {
    const body = JSON.stringify({ model: "instant", messages: ask("Say hello") });
    const t = performance.now();
    const a = await post(agentDirect, `${standin}/v1/chat/completions`, json, body);
    const ms = performance.now() - t;
    if (a.status !== 200 || JSON.parse(a.text).choices[0].message.content !== expected) throw new Error(`direct: ${a.status} ${a.text.slice(0, 300)}`);
    return ms;
  };
  const service = async () => {
    const body = JSON.stringify({ model: `${RUNTIME}/instant`, user: USER, messages: ask("Say hello") });
    const t = performance.now();
    const a = await post(agentService, `${server.url}/v1/chat/completions`, auth, body);
    const ms = performance.now() - t;
    if (a.status !== 200 || JSON.parse(a.text).choices[0].message.content !== expected) throw new Error(`service: ${a.status} ${a.text.slice(0, 300)}`);
    return ms;
  };
  const floor = async () => {
    const body = JSON.stringify({ model: "instant", messages: ask("Say hello") });
    const t = performance.now();
    const a = await post(agentFloor, `${floorUrl}/v1/chat/completions`, json, body);
    const ms = performance.now() - t;
    if (a.status !== 200 || JSON.parse(a.text).choices[0].message.content !== expected) throw new Error(`bare relays: ${a.status} ${a.text.slice(0, 300)}`);
    return ms;
  };
  const agentResponses = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const responses = async () => {
    const body = JSON.stringify({ model: `${RUNTIME}/instant`, user: USER, input: ask("Say hello")[0].content });
    const t = performance.now();
    const a = await post(agentResponses, `${server.url}/v1/responses`, auth, body);
    const ms = performance.now() - t;
    if (a.status !== 200 || JSON.parse(a.text).output[0].content[0].text !== expected) throw new Error(`responses: ${a.status} ${a.text.slice(0, 300)}`);
    return ms;
  };
  for (let i = 0; i < WARMUP_REQUESTS; i++) await direct(), await floor(), await service(), await responses();
  const [d, b, s, r] = await inTurn(REQUESTS, [direct, floor, service, responses]);
  for (const a of [agentDirect, agentService, agentFloor, agentResponses]) a.destroy();
  return { d, b, s, r };
}

/** `n` rounds of the paths, one call each, the first of each round rotating; each path's results. */
async function inTurn<T>(n: number, paths: (() => Promise<T>)[]): Promise<T[][]> {
  const out: T[][] = paths.map(() => []);
  for (let i = 0; i < n; i++) for (let k = 0; k < paths.length; k++) {
    const at = (i + k) % paths.length;
    out[at].push(await paths[at]());
  }
  return out;
}

/** Scenario 3, first part: one stream at a time, directly, through the bare relays and through the service in turn, each read to its end. */
async function ttft(server: BenchServer, standin: string, floorUrl: string) {
  const agentDirect = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const agentService = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const agentFloor = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const auth = { ...json, authorization: `Bearer ${server.appKey}` };
  // Through the service, two deltas that reach it together (the worker's link under load) may go out as one (a valid stream: deltas are any pieces of the text): all of the text, then, not every piece.
  let chars = 0;
  const check = (path: string, r: StreamResult, merged = false) => {
    if (!merged && !r.error && r.chunks === CHUNKS) chars ||= r.chars;
    if (r.error || !r.done || (merged ? r.chunks > CHUNKS || (chars > 0 && r.chars !== chars) : r.chunks !== CHUNKS) || !r.usage) throw new Error(`${path} stream: ${JSON.stringify(r)}`);
    return r;
  };
  const direct = async () =>
    check("direct", await stream(agentDirect, `${standin}/v1/chat/completions`, json, JSON.stringify({ model: "paced64", stream: true, stream_options: { include_usage: true }, messages: ask("Count") })));
  const service = async () =>
    check(
      "service",
      await stream(agentService, `${server.url}/v1/chat/completions`, auth, JSON.stringify({ model: `${RUNTIME}/paced64`, user: USER, stream: true, stream_options: { include_usage: true }, messages: ask("Count") })),
      true,
    );
  const floor = async () =>
    check("bare relays", await stream(agentFloor, `${floorUrl}/v1/chat/completions`, json, JSON.stringify({ model: "paced64", stream: true, stream_options: { include_usage: true }, messages: ask("Count") })));
  const agentResponses = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const responses = async () => check("responses", await stream(agentResponses, `${server.url}/v1/responses`, auth, JSON.stringify({ model: `${RUNTIME}/paced64`, user: USER, stream: true, input: ask("Count")[0].content })), true);
  for (let i = 0; i < 2; i++) await direct(), await floor(), await service(), await responses();
  const [d, b, s, r] = await inTurn(TTFT_STREAMS, [direct, floor, service, responses]);
  for (const a of [agentDirect, agentService, agentFloor, agentResponses]) a.destroy();
  return { d, b, s, r };
}

// ---------------------------------------------------------------- many streams

interface Many {
  n: number;
  completed: number;
  /** Completed with every chunk, no stall. */
  clean: number;
  /** Completed, all 64 chunks within 10 ms: the stream came as one burst, not paced. */
  bursts: number;
  wallMs: number;
  ttft: number[];
  maxGap: number[];
  total: number[];
  errors: string[];
}

async function manyStreams(label: string, url: string, headers: Record<string, string>, body: string): Promise<Many> {
  process.stdout.write(`  ${label}: ${STREAMS} streams at once...\n`);
  const from = process.hrtime.bigint() / 1000n;
  const r = await runLoad<{ results: StreamResult[]; wallMs: number }>({ mode: "streams", url, headers, body, count: STREAMS, timeoutMs: STREAMS_TIMEOUT_MS }, STREAMS_TIMEOUT_MS + 30_000);
  // To read a `node --cpu-prof` profile of this process for this part only (its clock, µs).
  if (process.env.SVC_BENCH_PROFILE_WINDOWS === "1") process.stdout.write(`    window in a --cpu-prof profile's clock (µs): ${from} ${process.hrtime.bigint() / 1000n}\n`);
  // Complete: all the text, however many chunks carried it (under load the worker sends pieces that reach it together in one).
  const completed = r.results.filter((x) => x.done && x.chars === PACED_CHARS && !x.error);
  const errors = [...new Set(r.results.filter((x) => x.error).map((x) => x.error!))].slice(0, 3);
  return {
    n: r.results.length,
    completed: completed.length,
    clean: completed.filter((x) => x.maxGap < TARGET.stallMs).length,
    bursts: completed.filter((x) => x.maxGap < BURST_MS).length,
    wallMs: r.wallMs,
    ttft: r.results.map((x) => x.ttft).filter(Number.isFinite),
    maxGap: r.results.map((x) => x.maxGap),
    total: completed.map((x) => x.total),
    errors,
  };
}

// ---------------------------------------------------------------- report

type Row = [string, string, string, string, string, string, string];
const verdict = (ok: boolean) => (ok ? "PASS" : "MISS");

function render(rows: Row[]): string {
  const all: Row[] = [["", "measure", "baseline", "service", "added / ratio", "target", ""], ...rows];
  const widths = all[0].map((_, i) => Math.max(...all.map((row) => row[i].length)));
  return all.map((row) => "  " + row.map((c, i) => (i >= 2 && i <= 4 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ").trimEnd()).join("\n");
}

const dist = (a: number[], d = 1) => `${f(percentile(a, 50), d)} / ${f(percentile(a, 99), d)} / ${f(Math.max(...a), d)}`;

// ---------------------------------------------------------------- main

/** What to undo before leaving, last first; also on Ctrl-C (children are killed on exit in any case). */
const undo: (() => Promise<void> | void)[] = [];
async function undoAll(): Promise<void> {
  for (const fn of undo.splice(0).reverse()) await fn();
  removeTempDirs();
}

async function main() {
  const startedAt = performance.now();
  say(`bench:chat: POST /v1/chat/completions and POST /v1/responses through the service against a hello server, a bare Express echo and the model runtime called directly`);
  say(`machine: ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} at start (other processes on the machine skew the numbers)`);
  const missed: string[] = [];
  const rows: Row[] = [];
  const notes: string[] = [];
  let worker: Child | null = null;
  try {
    const standinChild = spawnNode(["--import", "tsx", "bench/chat-standin.ts"]);
    undo.push(() => standinChild.stop());
    const standin = (await standinChild.waitFor(/^(http:\/\/\S+)$/m))[1];
    standinChild.quiet();

    const baselines = await startBaselines();
    undo.push(baselines.close);

    const servers: Record<string, BenchServer> = {};
    servers.pglite = await startBenchServer({ kind: "pglite", dataDir: null });
    undo.push(() => servers.pglite.close());
    const scratch = await scratchPostgres(POSTGRES_URL);
    if ("error" in scratch) notes.push(`postgres: SKIPPED, not reachable at ${POSTGRES_URL} (${scratch.error}); set SVC_BENCH_POSTGRES_URL to bench it.`);
    else {
      undo.push(() => scratch.drop().catch((err) => void process.stderr.write(`could not drop the scratch database: ${(err as Error).message}\n`)));
      servers.postgres = await startBenchServer({ kind: "postgres", url: scratch.url });
      undo.push(() => servers.postgres.close());
    }
    const chatServer = servers[CHAT_DATABASE];
    if (!chatServer) throw new Error(`SVC_BENCH_CHAT_DATABASE=${CHAT_DATABASE}: no such database here`);

    // Steady state, as a deployment's database is after a while (SVC_BENCH_HISTORY=0: a fresh one, as before 2026-11-28's seventh part).
    await seedHistory(chatServer.db, HISTORY_RUNS);
    if (HISTORY_RUNS > 0) notes.push(`the database held ${HISTORY_RUNS} finished runs of another app, analysed, before the measures (SVC_BENCH_HISTORY)`);
    const home = await pairMachine(chatServer, USER, {
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: false, openai: [{ name: "standin", url: `${standin}/v1` }] },
    });
    worker = spawnWorker(home);
    const w = worker;
    undo.push(() => w.stop());
    await worker.waitFor(/Connected/);
    worker.quiet();
    // The floor: the same hops with nothing done at them (bench/floor-relay.ts), in this process like the service.
    const floorRelay = await startFloorRelay(null);
    undo.push(floorRelay.close);
    const floorWorker = await startFloorWorker(floorRelay, standin);
    undo.push(() => floorWorker.stop());

    // ---- scenarios 1 and 4
    if (SCENARIOS.has("1")) {
      say(`scenario 1 (and 4): requests/s`);
      const echoBody = JSON.stringify({ model: "svc/echo", user: USER, messages: [{ role: "user", content: "Hello, how are you today?" }] });
      const hello = await rps("hello (node:http)", baselines.helloUrl, json, echoBody);
      const bare = await rps("bare Express JSON echo", baselines.expressUrl, json, echoBody);
      const echo: Record<string, RpsResult> = {};
      for (const db of Object.keys(servers)) echo[db] = await rps(`svc/echo on ${db}`, `${servers[db].url}/v1/chat/completions`, { ...json, authorization: `Bearer ${servers[db].appKey}` }, echoBody);

      rows.push(["1", `requests/s, ${CONCURRENCY} in flight: raw node:http hello`, f(hello.perSecond, 0), "", "", "", ""]);
      rows.push(["1", `requests/s, ${CONCURRENCY} in flight: bare Express JSON echo`, f(bare.perSecond, 0), "", "", "", ""]);
      for (const [db, e] of Object.entries(echo)) {
        const vsHello = e.perSecond / hello.perSecond;
        const vsExpress = e.perSecond / bare.perSecond;
        rows.push(["1", `svc/echo on ${db} ÷ hello`, f(hello.perSecond, 0), f(e.perSecond, 0), `${f(vsHello, 3)}×`, `≥ ${TARGET.echoVsHello}×`, verdict(vsHello >= TARGET.echoVsHello)]);
        rows.push(["1", `svc/echo on ${db} ÷ bare Express`, f(bare.perSecond, 0), f(e.perSecond, 0), `${f(vsExpress, 3)}×`, `≥ ${TARGET.echoVsExpress}×`, verdict(vsExpress >= TARGET.echoVsExpress)]);
        if (vsHello < TARGET.echoVsHello) missed.push(`1 (${db} vs hello)`);
        if (vsExpress < TARGET.echoVsExpress) missed.push(`1 (${db} vs Express)`);
      }
      notes.push(`load client CPU µs per request (its own process): hello ${f((hello.clientCpuMs / hello.counted) * 1000, 0)}, Express ${f((bare.clientCpuMs / bare.counted) * 1000, 0)}, ${Object.entries(echo).map(([db, e]) => `svc/echo ${db} ${f((e.clientCpuMs / e.counted) * 1000, 0)}`).join(", ")}`);
      const lat = (r: RpsResult) => `${f(r.median)} / ${f(r.p99)}`;
      rows.push(["1", `  latency under that load, median / p99, ms: hello, Express`, lat(hello), lat(bare), "", "", ""]);
      for (const [db, e] of Object.entries(echo)) rows.push(["1", `  latency under that load, median / p99, ms: Express, svc/echo ${db}`, lat(bare), lat(e), "", "", ""]);
      rows.push(["1", `  server CPU µs per request: hello, Express`, f(hello.serverCpuUs, 0), f(bare.serverCpuUs, 0), "", "", ""]);
      for (const [db, e] of Object.entries(echo)) rows.push(["1", `  server CPU µs per request: Express, svc/echo ${db}`, f(bare.serverCpuUs, 0), f(e.serverCpuUs, 0), "", "", ""]);
      if (echo.postgres) {
        const ratio = echo.pglite.perSecond / echo.postgres.perSecond;
        rows.push(["4", "svc/echo requests/s: PGlite ÷ Postgres", f(echo.postgres.perSecond, 0), f(echo.pglite.perSecond, 0), `${f(ratio, 3)}×`, `≥ ${TARGET.pgliteVsPostgres}×`, verdict(ratio >= TARGET.pgliteVsPostgres)]);
        if (ratio < TARGET.pgliteVsPostgres) missed.push("4");
      }
    }

    // ---- scenario 2
    if (SCENARIOS.has("2")) {
      say(`scenario 2 (on ${CHAT_DATABASE}): ${WARMUP_REQUESTS} warm-up + ${REQUESTS} non-streamed completions per path, one at a time, alternating...`);
      const routed = await routedLatency(chatServer, standin, floorRelay.url);
      const addMed = percentile(routed.s, 50) - percentile(routed.d, 50);
      const addP99 = percentile(routed.s, 99) - percentile(routed.d, 99);
      const floorMed = percentile(routed.b, 50) - percentile(routed.d, 50);
      const floorP99 = percentile(routed.b, 99) - percentile(routed.d, 99);
      rows.push(["2", `completion via worker (${CHAT_DATABASE}) vs runtime direct, median ms`, f(percentile(routed.d, 50)), f(percentile(routed.s, 50)), `+${f(addMed)}`, `≤ +${TARGET.addedMedianMs}`, verdict(addMed <= TARGET.addedMedianMs)]);
      rows.push(["2", `completion via worker (${CHAT_DATABASE}) vs runtime direct, p99 ms`, f(percentile(routed.d, 99)), f(percentile(routed.s, 99)), `+${f(addP99)}`, `≤ +${TARGET.addedP99Ms}`, verdict(addP99 <= TARGET.addedP99Ms)]);
      rows.push(["2", `  the floor: via bare relays vs runtime direct, median / p99 ms`, `${f(percentile(routed.d, 50))} / ${f(percentile(routed.d, 99))}`, `${f(percentile(routed.b, 50))} / ${f(percentile(routed.b, 99))}`, `+${f(floorMed)} / +${f(floorP99)}`, "", ""]);
      const respMed = percentile(routed.r, 50) - percentile(routed.d, 50);
      const respP99 = percentile(routed.r, 99) - percentile(routed.d, 99);
      rows.push(["2", `  POST /v1/responses via worker vs runtime direct, median / p99 ms`, `${f(percentile(routed.d, 50))} / ${f(percentile(routed.d, 99))}`, `${f(percentile(routed.r, 50))} / ${f(percentile(routed.r, 99))}`, `+${f(respMed)} / +${f(respP99)}`, "", ""]);
      rows.push(["2", `  responses ÷ chat completions, added median`, `+${f(addMed)}`, `+${f(respMed)}`, `${f(respMed / addMed)}×`, "", ""]);
      if (addMed > TARGET.addedMedianMs) missed.push("2 (median)");
      if (addP99 > TARGET.addedP99Ms) missed.push("2 (p99)");
    }

    // ---- scenario 3
    if (SCENARIOS.has("3")) {
      say(`scenario 3 (on ${CHAT_DATABASE}): 2 warm-up + ${TTFT_STREAMS} streams of ${CHUNKS} chunks 20 ms apart per path, one at a time, alternating...`);
      const t = await ttft(chatServer, standin, floorRelay.url);
      const td = t.d.map((r) => r.ttft);
      const ts = t.s.map((r) => r.ttft);
      const tb = t.b.map((r) => r.ttft);
      const addTtft = percentile(ts, 50) - percentile(td, 50);
      rows.push(["3", `time to first token (${CHAT_DATABASE}), median ms`, f(percentile(td, 50)), f(percentile(ts, 50)), `+${f(addTtft)}`, `≤ +${TARGET.ttftAddedMedianMs}`, verdict(addTtft <= TARGET.ttftAddedMedianMs)]);
      rows.push(["3", `  the floor: time to first token via bare relays, median ms`, f(percentile(td, 50)), f(percentile(tb, 50)), `+${f(percentile(tb, 50) - percentile(td, 50))}`, "", ""]);
      rows.push(["3", `  time to first token, p99 (= max here) ms`, f(percentile(td, 99)), f(percentile(ts, 99)), `+${f(percentile(ts, 99) - percentile(td, 99))}`, "", ""]);
      rows.push(["3", `  one stream: max chunk gap, median / max ms`, `${f(percentile(t.d.map((r) => r.maxGap), 50), 1)} / ${f(Math.max(...t.d.map((r) => r.maxGap)), 1)}`, `${f(percentile(t.s.map((r) => r.maxGap), 50), 1)} / ${f(Math.max(...t.s.map((r) => r.maxGap)), 1)}`, "", "", ""]);
      const tr = t.r.map((r) => r.ttft);
      const respTtft = percentile(tr, 50) - percentile(td, 50);
      rows.push(["3", `  POST /v1/responses: time to first token, median ms`, f(percentile(td, 50)), f(percentile(tr, 50)), `+${f(respTtft)}`, "", ""]);
      rows.push(["3", `  responses ÷ chat completions, time to first token added`, `+${f(addTtft)}`, `+${f(respTtft)}`, `${f(respTtft / addTtft)}×`, "", ""]);
      if (addTtft > TARGET.ttftAddedMedianMs) missed.push("3 (TTFT)");

      say(`scenario 3 (on ${CHAT_DATABASE}): ${STREAMS} concurrent streams, directly then through the service (at most ${STREAMS_TIMEOUT_MS / 1000} s)...`);
      const directMany = await manyStreams("runtime directly", `${standin}/v1/chat/completions`, json, JSON.stringify({ model: "paced64", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "Count {i}" }] }));
      const cpu0 = ownCpuMs();
      const serviceMany = await manyStreams(
        "through the service",
        `${chatServer.url}/v1/chat/completions`,
        { ...json, authorization: `Bearer ${chatServer.appKey}` },
        JSON.stringify({ model: `${RUNTIME}/paced64`, user: USER, stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: `Count ${Date.now()} {i}` }] }),
      );
      const manyCpu = ownCpuMs() - cpu0;
      const cpuR = ownCpuMs();
      const responsesMany = await manyStreams(
        "POST /v1/responses through the service",
        `${chatServer.url}/v1/responses`,
        { ...json, authorization: `Bearer ${chatServer.appKey}` },
        JSON.stringify({ model: `${RUNTIME}/paced64`, user: USER, stream: true, input: `Count ${Date.now()} {i}` }),
      );
      const responsesCpu = ownCpuMs() - cpuR;
      const cpu1 = ownCpuMs();
      const floorMany = await manyStreams("through the bare relays (the floor)", `${floorRelay.url}/v1/chat/completions`, json, JSON.stringify({ model: "paced64", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "Count {i}" }] }));
      const floorCpu = ownCpuMs() - cpu1;
      const ok = serviceMany.clean === STREAMS;
      rows.push(["3", `${STREAMS} streams at once: completed, max gap < ${TARGET.stallMs} ms`, `${directMany.clean} / ${directMany.n}`, `${serviceMany.clean} / ${serviceMany.n}`, "", `${STREAMS} / ${STREAMS}`, verdict(ok)]);
      rows.push(["3", `  per-stream max chunk gap, median / p99 / max ms`, dist(directMany.maxGap), dist(serviceMany.maxGap), "", "", ""]);
      rows.push(["3", `  streams that came as one burst (max gap < ${BURST_MS} ms)`, String(directMany.bursts), String(serviceMany.bursts), "", "", ""]);
      rows.push(["3", `  time to first token, median / p99 / max ms`, dist(directMany.ttft), dist(serviceMany.ttft), "", "", ""]);
      rows.push(["3", `  stream duration (ideal ${((CHUNKS - 1) * 20) / 1000} s), median / p99 / max ms`, dist(directMany.total, 0), dist(serviceMany.total, 0), "", "", ""]);
      rows.push(["3", `  all streams done in, s; service process CPU s`, f(directMany.wallMs / 1000, 1), `${f(serviceMany.wallMs / 1000, 1)}; ${f(manyCpu / 1000, 1)}`, "", "", ""]);
      rows.push(["3", `  the floor, bare relays: completed; TTFT median / p99 / max ms`, "", `${floorMany.clean} / ${floorMany.n}; ${dist(floorMany.ttft)}`, "", "", ""]);
      rows.push(["3", `  the floor, bare relays: all done in, s; relay process CPU s (ms per stream)`, "", `${f(floorMany.wallMs / 1000, 1)}; ${f(floorCpu / 1000, 1)} (${f(floorCpu / STREAMS)})`, "", "", ""]);
      rows.push(["3", `  CPU ms per stream: service; bare relays`, "", `${f(manyCpu / STREAMS)}; ${f(floorCpu / STREAMS)}`, `${f(manyCpu / floorCpu)}×`, "", ""]);
      rows.push(["3", `  POST /v1/responses, ${STREAMS} streams: completed; TTFT median / p99 / max ms`, "", `${responsesMany.clean} / ${responsesMany.n}; ${dist(responsesMany.ttft)}`, "", "", ""]);
      rows.push(["3", `  POST /v1/responses: all done in, s; CPU ms per stream (÷ chat completions)`, "", `${f(responsesMany.wallMs / 1000, 1)}; ${f(responsesCpu / STREAMS)}`, `${f(responsesCpu / manyCpu)}×`, "", ""]);
      if (!ok) missed.push("3 (1000 streams)");
      if (responsesMany.clean !== STREAMS) missed.push("3 (1000 responses streams)");
      for (const e of responsesMany.errors) notes.push(`responses streams: ${e}`);
      for (const e of serviceMany.errors) notes.push(`service streams: ${e}`);
      for (const e of directMany.errors) notes.push(`direct streams: ${e}`);
    }
  } catch (err) {
    if (worker) (err as Error).message += `\nthe worker: ${worker.describe()}`;
    throw err;
  } finally {
    await undoAll();
  }
  say(`\n${render(rows)}`);
  for (const n of notes) say(`  ${n}`);
  say(`  added = service − baseline per percentile, measured interleaved in this run; ratio = service ÷ baseline. Missed: ${missed.length ? missed.join(", ") : "none"}. Total ${((performance.now() - startedAt) / 1000).toFixed(0)} s.`);
  process.exitCode = process.env.SVC_BENCH_STRICT === "1" && missed.length ? 1 : 0;
}

const stop = () => void undoAll().finally(() => process.exit(130));
process.once("SIGINT", stop).once("SIGTERM", stop);
await main();
