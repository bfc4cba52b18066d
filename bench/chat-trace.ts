/**
 * Where the time of a chat completion goes on the service path, to go with
 * bench/chat.ts: the same set-up (server in this process, a real worker process,
 * the stand-in runtime of bench/chat-standin.ts), the server's objects wrapped
 * from outside (no server change) so each step is timed.
 *
 *   node --conditions=svc-source --import tsx bench/chat-trace.ts [pglite|postgres] [turn|stream|echo|echo-load]
 *
 * `turn` (default): non-streamed completions on the worker's runtime, one at a time
 * (SVC_TRACE_REQUESTS, default 100 after 20 warm-up); the last one's timeline and
 * the median of each step. `stream`: the same for streamed `paced64` completions,
 * up to the first token (SVC_TRACE_REQUESTS default 10). `echo`: `svc/echo`, one at
 * a time. `echo-load`: `svc/echo` with 64 in flight from the load client for
 * SVC_TRACE_SECONDS (default 5); prints each step's median and count per request,
 * and the window in the clock of a `node --cpu-prof` profile of this process.
 * SVC_TRACE_USERS=many: each of the 64 loops names its own user (one user by default).
 */
import http from "node:http";
import { performance } from "node:perf_hooks";
import { post, stream } from "./chat-client.js";
import { pairMachine, percentile, removeTempDirs, scratchPostgres, spawnNode, spawnWorker, startBenchServer } from "./lib.js";
import type { DatabaseTarget } from "../server/db/open.js";
import { durations, mark, marks, sqlLabel, traceDispatch, wrap } from "./instruments.js";

const which = process.argv[2] ?? "pglite";
const mode = process.argv[3] ?? "turn";
const REQUESTS = Number(process.env.SVC_TRACE_REQUESTS ?? (mode === "stream" ? 10 : 100));
const WARMUP = mode === "stream" ? 2 : 20;
const SECONDS = Number(process.env.SVC_TRACE_SECONDS ?? 5);
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const USER = "trace-user";

// ---------------------------------------------------------------- set-up

const standinChild = spawnNode(["--import", "tsx", "bench/chat-standin.ts"]);
const standin = (await standinChild.waitFor(/^(http:\/\/\S+)$/m))[1];
standinChild.quiet();
let drop: (() => Promise<void>) | null = null;
let target: DatabaseTarget = { kind: "pglite", dataDir: null };
if (which === "postgres") {
  const s = await scratchPostgres(POSTGRES_URL);
  if ("error" in s) throw new Error(`Postgres at ${POSTGRES_URL}: ${s.error}`);
  drop = s.drop;
  target = { kind: "postgres", url: s.url };
}
const server = await startBenchServer(target);
const home = await pairMachine(server, USER, { runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: false, openai: [{ name: "standin", url: `${standin}/v1` }] } });
const profDir = process.env.SVC_TRACE_WORKER_PROF;
const worker = profDir
  ? spawnNode(["--cpu-prof", `--cpu-prof-dir=${profDir}`, "--conditions=svc-source", "--import", "tsx", "worker/src/main.ts", "start"], { SVC_WORKER_HOME: home })
  : spawnWorker(home);
await worker.waitFor(/Connected/);
worker.quiet();

const sv = server.services;
wrap(server.db, "query", sqlLabel);
wrap(sv.keys, "verifyAppKey", () => "auth: verifyAppKey");
wrap(sv.chat, "complete", () => "ChatService.complete");
wrap(sv.runs, "begin", () => "RunService.begin");
wrap(sv.runStore, "write", () => "store.write");
wrap(sv.runStore, "eventPage", () => "store.eventPage (follower catch-up)");
wrap(sv.runBus, "publish", () => "bus.publish");
traceDispatch(sv.workers, "[job] dispatch -> first event back (WS, worker, runtime, WS)");

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const headers = { "content-type": "application/json", authorization: `Bearer ${server.appKey}` };
let n = 0;
const body = (model: string, stream = false) => JSON.stringify({ model, user: USER, messages: [{ role: "user", content: `hello #${++n} ${Date.now()}` }], ...(stream ? { stream: true } : {}) });
const med = (a: number[]) => percentile(a, 50);
const f = (x: number) => x.toFixed(2).padStart(7);

// ---------------------------------------------------------------- one at a time

const perRequest = new Map<string, number[]>();
function account(tl: { t: number; what: string }[]) {
  const sums = new Map<string, number>();
  const add = (k: string, v: number) => sums.set(k, (sums.get(k) ?? 0) + v);
  const open = new Map<string, number>();
  for (const m of tl) {
    const label = m.what.slice(2);
    if (m.what.startsWith("> ")) open.set(label, m.t);
    else if (m.what.startsWith("< ") && open.has(label)) add(label, m.t - open.get(label)!), open.delete(label);
  }
  const at = (re: RegExp) => tl.find((m) => re.test(m.what))?.t;
  const gap = (k: string, a?: number, b?: number) => a !== undefined && b !== undefined && add(`[gap] ${k}`, b - a);
  gap("client send -> auth (HTTP, express, body, ts-rest)", 0, at(/^> auth/));
  gap("auth done -> ChatService.complete", at(/^< auth/), at(/^> ChatService/));
  gap("begin done -> job dispatched", at(/^< RunService.begin/), at(/^dispatch job/));
  gap("first job event -> answer in hand", at(/^job event/), tl.at(-1)!.t);
  add("[total]", tl.at(-1)!.t);
  for (const [k, v] of sums) (perRequest.get(k) ?? perRequest.set(k, []).get(k)!).push(v);
}

async function oneAtATime() {
  for (let i = 0; i < WARMUP + REQUESTS; i++) {
    marks.length = 0;
    const origin = performance.now();
    mark("client: send");
    if (mode === "echo") {
      const a = await post(agent, `${server.url}/v1/chat/completions`, headers, body("svc/echo"));
      if (a.status !== 200) throw new Error(a.text);
      mark("client: answer in hand");
    } else if (mode === "turn") {
      const a = await post(agent, `${server.url}/v1/chat/completions`, headers, body("openai-compatible:standin/instant"));
      if (a.status !== 200) throw new Error(a.text);
      mark("client: answer in hand");
    } else {
      // Time to first token: the timeline is cut at the first content chunk.
      let cut = 0;
      const r = await stream(agent, `${server.url}/v1/chat/completions`, headers, body("openai-compatible:standin/paced64", true));
      cut = origin + r.ttft;
      const keep = marks.filter((m) => m.t <= cut);
      marks.length = 0;
      marks.push(...keep, { t: cut, what: "client: first token in hand" });
    }
    const tl = marks.map((m) => ({ t: m.t - origin, what: m.what }));
    if (i >= WARMUP) account(tl);
    if (i === WARMUP + REQUESTS - 1) {
      let prev = 0;
      for (const m of tl) process.stdout.write(`${f(m.t)} ms (+${f(m.t - prev)})  ${m.what}\n`), (prev = m.t);
      process.stdout.write("\n");
    }
  }
  process.stdout.write(`${which}, ${mode}, one at a time, ${REQUESTS} after ${WARMUP} warm-up; per request, median ms (a step's calls summed; steps overlap):\n`);
  for (const [k, v] of [...perRequest].sort((a, b) => med(b[1]) - med(a[1]))) process.stdout.write(`  ${f(med(v))}  in ${String(v.length).padStart(3)}  ${k}\n`);
  for (const [k, v] of durations) if (k.startsWith("[job]")) process.stdout.write(`  ${f(med(v.slice(WARMUP)))}  in ${String(v.length - WARMUP).padStart(3)}  ${k}\n`);
}

async function echoLoad() {
  const load = (seconds: number) => {
    const child = spawnNode(["--import", "tsx", "bench/chat-load.ts", JSON.stringify({ mode: "rps", url: `${server.url}/v1/chat/completions`, headers, body: process.env.SVC_TRACE_USERS === "many" ? body("svc/echo").replace(USER, `${USER}-{k}`) : body("svc/echo"), concurrency: 64, warmSeconds: 0, seconds })]);
    return child.waitFor(/^RESULT (.*)$/m, (seconds + 30) * 1000).then((m) => JSON.parse(m[1]) as { total: number; perSecond: number; median: number; p99: number });
  };
  await load(1);
  durations.clear();
  const from = process.hrtime.bigint() / 1000n;
  const r = await load(SECONDS);
  const to = process.hrtime.bigint() / 1000n;
  process.stdout.write(`${which}, svc/echo, 64 in flight: ${r.perSecond.toFixed(0)} requests/s, median ${r.median.toFixed(2)} p99 ${r.p99.toFixed(2)} ms (load client's view; the window includes its start)\n`);
  const rows = [...durations].map(([k, v]) => ({ k, n: v.length / r.total, m: med(v), p: percentile(v, 99) }));
  for (const row of rows.sort((a, b) => b.n * b.m - a.n * a.m)) process.stdout.write(`  median ${f(row.m)}  p99 ${f(row.p)}  ${row.n.toFixed(2).padStart(5)}/request  ${row.k}\n`);
  process.stdout.write(`window in a --cpu-prof profile's clock (µs): ${from} ${to}\n`);
}

try {
  if (mode === "echo-load") await echoLoad();
  else await oneAtATime();
} finally {
  agent.destroy();
  await worker.stopGently();
  await server.close();
  standinChild.stop();
  await drop?.();
  removeTempDirs();
}
