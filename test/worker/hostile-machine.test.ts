import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import WebSocket, { WebSocketServer } from "ws";
import { Svc } from "@svc/sdk";
import { WORKER_CLOSE, WORKER_MAX_JOB_FRAME_BYTES, serverMessage, workerMessage, type JobEvent, type WorkerMessage } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { closeRawWorkers, connectRawWorker, type RawWorker } from "../helpers/raw-worker.js";
import { runCalls } from "../helpers/run-calls.js";

/**
 * A hostile machine: a test double speaking the real worker protocol over a real
 * WebSocket with a real pairing token, flooding the service. The per-run limits
 * fail its runs with a named reason, the per-connection limits close it with
 * 4029 (1009 for a frame too large), text deltas are merged before they are
 * stored, a conversation too large for the link fails its run without dropping
 * the link, and another user's run on a real svc-worker beside it completes.
 * Limits are set small here (the `RUN_*` and `WORKER_*` variables) so each is
 * reached in seconds; the defaults are in docs/operators/security.md.
 */

const MiB = 1024 * 1024;
const LIMITS = {
  RUN_MAX_EVENTS: "200",
  RUN_MAX_EVENT_BYTES: String(4 * MiB),
  RUN_MAX_PERMISSION_REQUESTS: "20",
  RUN_MAX_TOOL_CALLS: "20",
  WORKER_MESSAGES_PER_SECOND: "4000",
  WORKER_BYTES_PER_SECOND: String(MiB),
  WORKER_JOB_FRAME_BYTES: String(MiB),
  // No queue: a runtime at its cap refuses new runs here (test/runs/run-queue.test.ts proves the queue).
  RUN_QUEUE_PER_MACHINE: "0",
};

const hello = (cap?: number) =>
  workerMessage("hello", {
    client: "hostile",
    version: "0",
    runtimes: [
      { name: "ollama", kind: "model", costClass: "user_hardware", models: ["m1"], ...(cap ? { maxConcurrentJobs: cap } : {}) },
      { name: "claude-code", kind: "agent", costClass: "user_subscription", models: [] },
    ],
  });
const event = (jobId: string, e: JobEvent) => workerMessage("job_event", { jobId, event: e });
const done = (jobId: string, output = "ok", finishReason = "stop") => event(jobId, { type: "done", finishReason, output, usage: { inputTokens: 1, outputTokens: 1 } });

onEachDatabase("a hostile machine on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let svc: Svc;
  const open: WebSocket[] = [];
  const workers: WorkerProcess[] = [];
  let users = 0;
  const memory: Record<string, number> = {};

  beforeAll(async () => {
    server = await startTestServerOn(db, LIMITS, { runningClock: true });
    model = await startModelStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
  }, 60_000);
  afterEach(() => closeRawWorkers(open));
  afterAll(async () => {
    for (const w of workers) w.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });


  /** A fresh user with a hostile machine online (hello said, welcomed). */
  async function hostile(cap?: number): Promise<{ user: string; machineId: string; w: RawWorker }> {
    const user = `mallory-${++users}`;
    const m = await pairViaApi(server, server.dev, user);
    const w = await connectRawWorker(server.url, m.token, open);
    w.send(hello(cap));
    await w.next("welcome");
    return { user, machineId: m.machineId, w };
  }

  const { startRun, getRun, ended, headers: appHeaders } = runCalls({ fetch: (p, i) => server.fetch(p, i), get dev() { return server.dev; } });
  const eventRows = (runId: string) => server.db.prisma.runEvent.count({ where: { runId } });

  /** A model run on the hostile machine: its first job. */
  async function modelRun(user: string, w: RawWorker, extra: Record<string, unknown> = {}) {
    const started = await startRun({ user, prompt: "go", route: { prefer: ["user-hardware"] }, ...extra });
    expect(started.status, JSON.stringify(started)).toBe(200);
    const job = await w.next("job");
    expect(job.payload.job.kind).toBe("model_turn");
    return { runId: started.runId!, jobId: job.payload.jobId };
  }
  async function agentRun(user: string, w: RawWorker, extra: Record<string, unknown> = {}) {
    const started = await startRun({ user, prompt: "go", model: "claude-code", route: { prefer: ["user-subscription"] }, ...extra });
    expect(started.status, JSON.stringify(started)).toBe(200);
    const job = await w.next("job");
    expect(job.payload.job.kind).toBe("agent_run");
    return { runId: started.runId!, jobId: job.payload.jobId };
  }

  it("20,000 small text deltas become far fewer stored events, with the text whole and in order", async () => {
    const { user, w } = await hostile();
    const { runId, jobId } = await modelRun(user, w);
    const N = 20_000;
    for (let i = 0; i < N; i++) await w.sendPaced(event(jobId, { type: "text_delta", text: String(i % 10) }));
    w.send(done(jobId));
    const run = await ended(runId);
    expect(run.status).toBe("completed");
    const expected = Array.from({ length: N }, (_, i) => String(i % 10)).join("");
    expect(run.output).toBe(expected);
    const deltas = await server.db.prisma.runEvent.findMany({ where: { runId, kind: "text_delta" }, orderBy: { seq: "asc" } });
    expect(deltas.map((d) => (d.data as { text: string }).text).join("")).toBe(expected);
    // Each stored delta holds many: at most one per 25 ms window (or per 16 KiB), far from one per delta.
    expect(deltas.length).toBeLessThan(N / 20);
    memory.deltaRows = deltas.length;
    // The seqs stay consecutive: re-attaching with Last-Event-ID misses nothing.
    const all = await server.db.prisma.runEvent.findMany({ where: { runId }, orderBy: { seq: "asc" }, select: { seq: true } });
    expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i + 1));
    expect(w.ws.readyState).toBe(WebSocket.OPEN);
  });

  it("per-run limits: bytes, stored events, permission requests and tool calls each fail the run with limit_exceeded and cancel the job", async () => {
    const { user, w } = await hostile();

    // Bytes: 4 MiB of events at most.
    const bytes = await modelRun(user, w);
    const chunk = "b".repeat(64 * 1024);
    for (let i = 0; i < 80 && w.ws.readyState === WebSocket.OPEN; i++) await w.sendPaced(event(bytes.jobId, { type: "text_delta", text: chunk }));
    const r1 = await ended(bytes.runId);
    expect([r1.status, r1.stopReason, r1.error?.code]).toEqual(["failed", "limit_exceeded", "limit_exceeded"]);
    expect(r1.error?.message).toMatch(/limit of 4194304 bytes of events/);
    expect((await w.next("cancel")).payload.jobId).toBe(bytes.jobId);
    w.send(event(bytes.jobId, { type: "failed", code: "cancelled", message: "stopped" }));
    expect(await eventRows(bytes.runId)).toBeLessThan(200);

    // Stored events: an agent CLI's activity, one row each, 200 at most.
    const events = await agentRun(user, w);
    for (let i = 0; i < 400; i++) await w.sendPaced(event(events.jobId, { type: "activity", summary: `step ${i}` }));
    const r2 = await ended(events.runId);
    expect([r2.status, r2.stopReason]).toEqual(["failed", "limit_exceeded"]);
    expect(r2.error?.message).toMatch(/limit of 200 stored events/);
    expect((await w.next("cancel")).payload.jobId).toBe(events.jobId);
    w.send(event(events.jobId, { type: "failed", code: "cancelled", message: "stopped" }));
    expect(await eventRows(events.runId)).toBeLessThanOrEqual(202);

    // Permission requests: 20 at most.
    const asks = await agentRun(user, w);
    for (let i = 0; i < 40; i++) await w.sendPaced(event(asks.jobId, { type: "permission_request", requestId: `r${i}`, tool: "Bash", input: { command: "ls" } }));
    const r3 = await ended(asks.runId);
    expect([r3.status, r3.stopReason]).toEqual(["failed", "limit_exceeded"]);
    expect(r3.error?.message).toMatch(/limit of 20 permission requests/);
    expect(await server.db.prisma.approval.count({ where: { runId: asks.runId } })).toBeLessThanOrEqual(20);
    w.send(event(asks.jobId, { type: "failed", code: "cancelled", message: "stopped" }));

    // Tool calls: 20 at most.
    const calls = await modelRun(user, w, { tools: [{ name: "t" }] });
    for (let i = 0; i < 40; i++) await w.sendPaced(event(calls.jobId, { type: "tool_call", id: `c${i}`, name: "t", arguments: "{}" }));
    w.send(done(calls.jobId, "", "tool_calls"));
    const r4 = await ended(calls.runId);
    expect([r4.status, r4.stopReason]).toEqual(["failed", "limit_exceeded"]);
    expect(r4.error?.message).toMatch(/limit of 20 tool calls/);
    expect(await server.db.prisma.toolCall.count({ where: { runId: calls.runId } })).toBe(0);
    expect(w.ws.readyState).toBe(WebSocket.OPEN);
  });

  it("deadlines: a model turn past its deadline fails turn_timeout, an agent run past its own run_timeout; each job is cancelled", async () => {
    const { user, w } = await hostile();
    const turn = await modelRun(user, w, { limits: { turnTimeoutMs: 1000 } });
    const r1 = await ended(turn.runId);
    expect([r1.status, r1.stopReason, r1.error?.code]).toEqual(["failed", "turn_timeout", "turn_timeout"]);
    expect((await w.next("cancel")).payload.jobId).toBe(turn.jobId);

    const agent = await agentRun(user, w, { limits: { runTimeoutMs: 1500 } });
    w.send(event(agent.jobId, { type: "text_delta", text: "thinking..." }));
    const r2 = await ended(agent.runId);
    expect([r2.status, r2.stopReason, r2.error?.code]).toEqual(["failed", "run_timeout", "run_timeout"]);
    expect(r2.output).toBe("thinking...");
    expect((await w.next("cancel")).payload.jobId).toBe(agent.jobId);
  });

  it("per-connection limits: heartbeats, runtimes lists, error reports, kept-job lists, messages and bytes each close it with 4029; a frame over 1 MiB with 1009; rows and memory stay bounded; another user's run beside it completes", async () => {
    // Another user's machine: a real svc-worker serving the model stand-in.
    const bobUser = `bob-${++users}`;
    const bob = await pairViaApi(server, server.dev, bobUser, { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
    const worker = spawnWorker(["start"], bob.home);
    workers.push(worker);
    await worker.waitFor(/Connected/);

    const before = process.memoryUsage();
    const floods: [string, (w: RawWorker) => Promise<void>, number, RegExp][] = [
      ["heartbeats", async (w) => { for (let i = 0; i < 50; i++) w.send(workerMessage("heartbeat", { busy: [] })); }, WORKER_CLOSE.tooManyMessages, /heartbeats/],
      ["runtimes", async (w) => { for (let i = 0; i < 50; i++) w.send(workerMessage("runtimes", { runtimes: hello().payload.runtimes })); }, WORKER_CLOSE.tooManyMessages, /runtimes lists/],
      ["errors", async (w) => { for (let i = 0; i < 100; i++) w.send(workerMessage("error", { code: "x", message: "y" })); }, WORKER_CLOSE.tooManyMessages, /error reports/],
      // Each list of kept jobs costs a database read: one after each welcome is all a worker needs.
      ["jobs_held lists", async (w) => { for (let i = 0; i < 10; i++) w.send(workerMessage("jobs_held", { jobs: Array.from({ length: 256 }, (_, k) => ({ jobId: `job_${k}`, lastN: 0 })) })); }, WORKER_CLOSE.tooManyMessages, /jobs_held lists/],
      ["a frame over 1 MiB", async (w) => w.send(JSON.stringify({ v: 1, type: "heartbeat", payload: { busy: ["x".repeat(2 * MiB)] } })), 1009, /.*/],
    ];
    const app = svc.runs.create({ user: bobUser, prompt: "What is the weather?", tools: [{ name: "weather", run: () => ({ temp: 21 }) }] });
    for (const [what, flood, code, reason] of floods) {
      const { w } = await hostile();
      await flood(w);
      const closed = await w.closed;
      expect({ what, code: closed.code }).toEqual({ what, code });
      expect(closed.reason, what).toMatch(reason);
    }
    expect(server.logs.join("")).toMatch(/it sent a frame over 1048576 bytes/);

    // Closed for breaking a limit while a run's job is on it: the machine misbehaved, it did not drop off, so the run
    // ends at once (the grace is 300 s), saying which limit; the same machine's link merely dropping keeps its run waiting.
    const h = await hostile();
    const onIt = await modelRun(h.user, h.w);
    for (let i = 0; i < 50; i++) h.w.send(workerMessage("heartbeat", { busy: ["ollama"] }));
    expect((await h.w.closed).code).toBe(WORKER_CLOSE.tooManyMessages);
    const flooded = await ended(onIt.runId, 5000);
    expect(flooded).toMatchObject({ status: "failed", stopReason: "limit_exceeded", error: { code: "machine_limit_exceeded" } });
    expect(flooded.error?.message).toMatch(/it sent too many heartbeats/);
    const d = await hostile();
    const dropped = await modelRun(d.user, d.w);
    d.w.ws.terminate();
    await new Promise((r) => setTimeout(r, 1500));
    expect((await getRun(dropped.runId)).status).toBe("running");

    // Messages: tiny deltas faster than 4,000 per second (and 4,000 per job) past a burst of 5 s of it; the rows stay bounded.
    const m = await hostile();
    const flood1 = await modelRun(m.user, m.w);
    const tiny = JSON.stringify(event(flood1.jobId, { type: "text_delta", text: "z" }));
    let sent = 0;
    const closedMessages = m.w.closed;
    while (m.w.ws.readyState === WebSocket.OPEN && sent < 500_000) {
      await m.w.sendPaced(tiny, 256 * 1024);
      sent++;
    }
    expect((await closedMessages).code).toBe(WORKER_CLOSE.tooManyMessages);
    expect((await closedMessages).reason).toMatch(/too many messages/);
    memory.messagesSent = sent;
    memory.messageFloodRows = await eventRows(flood1.runId);
    expect(memory.messageFloodRows).toBeLessThanOrEqual(202);

    // Bytes: 64 KiB deltas past 1 MiB per second (and per job), after a 4 s burst.
    const b = await hostile();
    const flood2 = await modelRun(b.user, b.w);
    const big = JSON.stringify(event(flood2.jobId, { type: "text_delta", text: "q".repeat(64 * 1024) }));
    let bytesSent = 0;
    while (b.w.ws.readyState === WebSocket.OPEN && bytesSent < 200 * MiB) {
      await b.w.sendPaced(big, MiB);
      bytesSent += big.length;
    }
    const closedBytes = await b.w.closed;
    expect(closedBytes.code).toBe(WORKER_CLOSE.tooManyMessages);
    expect(closedBytes.reason).toMatch(/too many (bytes|messages)/);
    memory.bytesSentMiB = Math.round(bytesSent / MiB);
    // Its run stopped at 4 MiB: what is stored is bounded by the run's byte limit.
    const stored = await server.db.prisma.runEvent.findMany({ where: { runId: flood2.runId, kind: "text_delta" }, select: { data: true } });
    expect(stored.reduce((n, e) => n + (e.data as { text: string }).text.length, 0)).toBeLessThanOrEqual(4 * MiB);

    const after = process.memoryUsage();
    memory.heapGrowthMiB = Math.round((after.heapUsed - before.heapUsed) / MiB);
    memory.rssGrowthMiB = Math.round((after.rss - before.rss) / MiB);
    // The server (in this process) holds nothing of the floods once they are refused: far below what was sent.
    expect(after.heapUsed - before.heapUsed).toBeLessThan(256 * MiB);

    const result = await app.result();
    expect(result.status).toBe("completed");
    expect(result.output).toBe('The tool said: {"temp":21}');
    expect(worker.stdout).not.toMatch(/connection lost/);
    console.log(`[hostile-machine on ${db.name}] ${JSON.stringify(memory)}`);
  }, 180_000);

  it("a runtime at its advertised maxConcurrentJobs with no queue (RUN_QUEUE_PER_MACHINE=0) is busy: runs go back to the app or get compute_busy until a job ends, and a resumed turn waits for a slot", async () => {
    const { user, w } = await hostile(1);
    const first = await modelRun(user, w);
    const busy = await startRun({ user, prompt: "again", route: { prefer: ["user-hardware"] } });
    expect([busy.status, busy.error?.code]).toEqual([429, "compute_busy"]);
    const handedBack = await startRun({ user, prompt: "again", route: { prefer: ["user-hardware", "app"] } });
    expect([handedBack.status, handedBack.error?.code]).toEqual([409, "serve_in_app"]);
    expect(w.pending.filter((p) => p.type === "job")).toEqual([]);
    w.send(done(first.jobId));
    expect((await ended(first.runId)).status).toBe("completed");
    const next = await modelRun(user, w);
    w.send(done(next.jobId));
    expect((await ended(next.runId)).status).toBe("completed");

    // A model run waiting for the app's tool result holds no slot; its next turn, once answered, waits on the service for one.
    const waiting = await modelRun(user, w, { tools: [{ name: "t" }] });
    w.send(event(waiting.jobId, { type: "tool_call", id: "c1", name: "t", arguments: "{}" }));
    w.send(done(waiting.jobId, "", "tool_calls"));
    const [call] = await pollUntil(() => server.db.prisma.toolCall.findMany({ where: { runId: waiting.runId } }), (c) => c.length === 1);
    await pollUntil(() => getRun(waiting.runId), (r) => r.status === "waiting");
    const holder = await modelRun(user, w);
    const answered = await server.fetch(`/v1/runs/${waiting.runId}/tool_result`, { method: "POST", headers: appHeaders(), body: JSON.stringify({ callId: call.callId, result: "r" }) });
    expect(answered.status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    expect(w.pending.filter((p) => p.type === "job")).toEqual([]); // queued on the service, not sent past the cap
    w.send(done(holder.jobId));
    const resumed = await w.next("job");
    expect(resumed.payload.job.kind === "model_turn" && resumed.payload.job.messages.at(-1)).toMatchObject({ role: "tool", content: "r" });
    w.send(done(resumed.payload.jobId, "after the tool"));
    expect(await ended(waiting.runId)).toMatchObject({ status: "completed", output: "after the tool" });
  });

  it("a conversation over the link's frame limit fails its run conversation_too_large; the frame is never sent and the link stays up", async () => {
    const { user, w } = await hostile();
    const { runId, jobId } = await modelRun(user, w, { prompt: "p".repeat(600_000), tools: [{ name: "big" }] });
    w.send(event(jobId, { type: "tool_call", id: "c1", name: "big", arguments: "{}" }));
    w.send(done(jobId, "", "tool_calls"));
    const call = await pollUntil(() => server.db.prisma.toolCall.findMany({ where: { runId } }), (c) => c.length === 1);
    const res = await server.fetch(`/v1/runs/${runId}/tool_result`, { method: "POST", headers: appHeaders(), body: JSON.stringify({ callId: call[0].callId, result: "r".repeat(600_000) }) });
    expect(res.status).toBe(200);
    const run = await ended(runId);
    expect([run.status, run.stopReason, run.error?.code]).toEqual(["failed", "conversation_too_large", "conversation_too_large"]);
    expect(run.error?.message).toMatch(/more than the 1048576 bytes the link to the machine takes/);
    expect(server.logs.join("")).toMatch(/job not sent: its frame is over the link's limit/);
    await new Promise((r) => setTimeout(r, 300));
    expect(w.pending.filter((p) => p.type === "job")).toEqual([]);
    expect(w.ws.readyState).toBe(WebSocket.OPEN);
  });

  it("on a real svc-worker: the oversized conversation fails cleanly, with no reconnect, and the machine serves the next run", async () => {
    const user = `olga-${++users}`;
    const m = await pairViaApi(server, server.dev, user, { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
    const worker = spawnWorker(["start"], m.home);
    workers.push(worker);
    await worker.waitFor(/Connected/);
    const run = svc.runs.create({ user, prompt: "p".repeat(600_000), tools: [{ name: "weather", run: () => "w".repeat(600_000) }] });
    const result = await run.result();
    expect([result.status, result.stopReason]).toEqual(["failed", "conversation_too_large"]);
    await new Promise((r) => setTimeout(r, 3_000));
    const reconnects = (worker.stdout.match(/connection lost/g) ?? []).length;
    expect(reconnects).toBe(0);
    expect(worker.stdout.match(/Connected/g)).toHaveLength(1);
    const again = await svc.runs.create({ user, prompt: "hi" }).result();
    expect([again.status, again.output]).toEqual(["completed", "Hello from the stand-in model."]);
  }, 60_000);
});

/**
 * The worker's own side, against a stand-in service speaking the real protocol:
 * it says which job frames it takes and each runtime's cap, refuses a job over
 * that cap, and fails a job whose frame is too large instead of dropping the link.
 */
describe("svc-worker against a service that over-sends", () => {
  let model: ModelStandIn;
  let service: http.Server;
  let wss: WebSocketServer;
  let worker: WorkerProcess | null = null;

  beforeAll(async () => {
    model = await startModelStandIn();
    service = http.createServer();
    wss = new WebSocketServer({ server: service, maxPayload: 64 * MiB });
    await new Promise<void>((r) => service.listen(0, "127.0.0.1", r));
  });
  afterAll(async () => {
    worker?.stop();
    for (const c of wss.clients) c.terminate();
    wss.close();
    await new Promise((r) => service.close(r));
    await model.close();
    removeTempDirs();
  });

  it("advertises its frame limit and caps; refuses a job over the cap (at_capacity) and a frame too large (frame_too_large), keeping the link", async () => {
    const port = (service.address() as AddressInfo).port;
    const home = tempDir("svc-worker-home-");
    fs.writeFileSync(
      path.join(home, "credentials.json"),
      JSON.stringify({ server: `http://127.0.0.1:${port}`, connectUrl: `ws://127.0.0.1:${port}/v1/worker`, machineId: "mch_standin", pairingToken: "pt_svc_x", environment: "test", appName: "Stand-in", pairedAt: new Date().toISOString() }),
    );
    fs.writeFileSync(path.join(home, "config.json"), JSON.stringify({ maxConcurrentJobs: { ollama: 1 }, runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } }));
    const connected = new Promise<WebSocket>((resolve) => wss.once("connection", resolve));
    worker = spawnWorker(["start"], home);
    const ws = await connected;
    const messages: WorkerMessage[] = [];
    const waiters: (() => void)[] = [];
    ws.on("message", (d) => {
      messages.push(JSON.parse(d.toString()) as WorkerMessage);
      for (const w of waiters.splice(0)) w();
    });
    let closedCode: number | null = null;
    ws.on("close", (code) => (closedCode = code));
    const waitFor = async (ok: (m: WorkerMessage) => boolean) => {
      for (const deadline = Date.now() + 15_000; Date.now() < deadline; ) {
        const found = messages.find(ok);
        if (found) return found;
        await new Promise<void>((r) => (waiters.push(r), setTimeout(r, 200)));
      }
      throw new Error(`no such message; got ${JSON.stringify(messages).slice(0, 800)}`);
    };
    const eventOf = (jobId: string, type: string) => (m: WorkerMessage) => m.type === "job_event" && m.payload.jobId === jobId && m.payload.event.type === type;

    const hi = (await waitFor((m) => m.type === "hello")) as Extract<WorkerMessage, { type: "hello" }>;
    expect(hi.payload.maxJobFrameBytes).toBe(WORKER_MAX_JOB_FRAME_BYTES);
    expect(hi.payload.runtimes.map((r) => [r.name, r.maxConcurrentJobs])).toEqual([["ollama", 1]]);
    ws.send(JSON.stringify(serverMessage("welcome", { machineId: "mch_standin", heartbeatSeconds: 10, appName: "Stand-in" })));
    await worker.waitFor(/Connected/);
    expect(worker.stdout).toMatch(/serves ollama .*; 1 job\(s\) at once/);

    // Two jobs at once on a runtime capped at one: the second is refused.
    const turn = (prompt: string) => ({ kind: "model_turn" as const, runtime: "ollama", model: "llama3.2:3b", messages: [{ role: "user" as const, content: prompt }] });
    ws.send(JSON.stringify(serverMessage("job", { jobId: "job_a", job: turn("[slow] talk") })));
    ws.send(JSON.stringify(serverMessage("job", { jobId: "job_b", job: turn("hi") })));
    const refused = await waitFor(eventOf("job_b", "failed"));
    expect(refused).toMatchObject({ payload: { event: { type: "failed", code: "at_capacity" } } });

    // A job frame over what it takes: that job fails, the link stays.
    const huge = JSON.stringify(serverMessage("job", { jobId: "job_huge", job: turn("x".repeat(WORKER_MAX_JOB_FRAME_BYTES + 1024)) }));
    ws.send(huge);
    const tooLarge = await waitFor(eventOf("job_huge", "failed"));
    expect(tooLarge).toMatchObject({ payload: { event: { type: "failed", code: "frame_too_large" } } });
    expect(closedCode).toBeNull();

    // Cancelled, the first frees its slot and the next job runs; its text came merged (fewer frames than the model's 8-character pieces).
    ws.send(JSON.stringify(serverMessage("cancel", { jobId: "job_a" })));
    await waitFor(eventOf("job_a", "failed"));
    ws.send(JSON.stringify(serverMessage("job", { jobId: "job_c", job: turn("hi") })));
    const doneC = await waitFor(eventOf("job_c", "done"));
    expect(doneC).toMatchObject({ payload: { event: { output: "Hello from the stand-in model." } } });
    const deltas = messages.filter(eventOf("job_c", "text_delta")) as Extract<WorkerMessage, { type: "job_event" }>[];
    expect(deltas.map((d) => (d.payload.event as { text: string }).text).join("")).toBe("Hello from the stand-in model.");
    expect(deltas.length).toBeLessThan(4);
    expect(worker.stdout).not.toMatch(/connection lost/);
    expect(closedCode).toBeNull();
  }, 60_000);

  it("never sends a frame over 1 MiB: big text goes in pieces, a done too large goes without its output, a tool call too large fails its job", async () => {
    // A model server whose answers are larger than a frame: 1.5 MB of text, or a tool call with 1.5 MB of arguments.
    const big = "x".repeat(1_500_000);
    const bigModel = http.createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      if (req.url === "/api/tags") return res.end(JSON.stringify({ models: [{ name: "m" }] }));
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { messages: { content: string }[] };
      const frame = (delta: unknown, finish: string | null = null) => `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (body.messages[0].content === "call") res.write(frame({ tool_calls: [{ index: 0, id: "c1", function: { name: "t", arguments: JSON.stringify({ blob: big }) } }] }, "tool_calls"));
      else for (let i = 0; i < big.length; i += 300_000) res.write(frame({ content: big.slice(i, i + 300_000) }));
      res.end(`${frame({}, "stop")}data: [DONE]\n\n`);
    });
    await new Promise<void>((r) => bigModel.listen(0, "127.0.0.1", r));
    const port = (service.address() as AddressInfo).port;
    const home = tempDir("svc-worker-home-");
    fs.writeFileSync(
      path.join(home, "credentials.json"),
      JSON.stringify({ server: `http://127.0.0.1:${port}`, connectUrl: `ws://127.0.0.1:${port}/v1/worker`, machineId: "mch_big", pairingToken: "pt_svc_y", environment: "test", appName: "Stand-in", pairedAt: new Date().toISOString() }),
    );
    fs.writeFileSync(path.join(home, "config.json"), JSON.stringify({ runtimes: { ollama: `http://127.0.0.1:${(bigModel.address() as AddressInfo).port}`, llamacpp: false, lmstudio: false, claude: false, codex: false } }));
    const connected = new Promise<WebSocket>((resolve) => wss.once("connection", resolve));
    const w = spawnWorker(["start"], home);
    try {
      const ws = await connected;
      const frames: { bytes: number; m: WorkerMessage }[] = [];
      ws.on("message", (d: Buffer) => frames.push({ bytes: d.length, m: JSON.parse(d.toString()) as WorkerMessage }));
      let closedCode: number | null = null;
      ws.on("close", (code) => (closedCode = code));
      await pollUntil(async () => frames, (f) => f.some((x) => x.m.type === "hello"));
      ws.send(JSON.stringify(serverMessage("welcome", { machineId: "mch_big", heartbeatSeconds: 10, appName: "Stand-in" })));
      await w.waitFor(/Connected/);
      const turn = (content: string) => ({ kind: "model_turn" as const, runtime: "ollama", model: "m", messages: [{ role: "user" as const, content }], tools: [{ type: "function" as const, function: { name: "t" } }] });
      const end = (jobId: string) => (x: { m: WorkerMessage }) => x.m.type === "job_event" && x.m.payload.jobId === jobId && ["done", "failed"].includes(x.m.payload.event.type);

      ws.send(JSON.stringify(serverMessage("job", { jobId: "job_text", job: turn("talk") })));
      const text = await pollUntil(async () => frames, (f) => f.some(end("job_text")));
      const ofText = text.filter((x) => x.m.type === "job_event" && x.m.payload.jobId === "job_text").map((x) => (x.m as Extract<WorkerMessage, { type: "job_event" }>).payload.event);
      expect(ofText.filter((e) => e.type === "text_delta").map((e) => (e as { text: string }).text).join("")).toBe(big);
      expect(ofText.at(-1)).toMatchObject({ type: "done", output: "" });

      ws.send(JSON.stringify(serverMessage("job", { jobId: "job_call", job: turn("call") })));
      const call = await pollUntil(async () => frames, (f) => f.some(end("job_call")));
      const ended = call.find(end("job_call"))!.m as Extract<WorkerMessage, { type: "job_event" }>;
      expect(ended.payload.event).toMatchObject({ type: "failed", code: "frame_too_large" });
      await new Promise((r) => setTimeout(r, 300));
      expect(frames.filter((x) => x.m.type === "job_event" && x.m.payload.jobId === "job_call")).toHaveLength(1); // nothing of it after its failure
      expect(Math.max(...frames.map((f) => f.bytes))).toBeLessThanOrEqual(1024 * 1024);
      expect(closedCode).toBeNull();
      expect(w.stdout).toMatch(/job_call: an event of \d+ bytes is over the 1048576-byte frame limit/);
    } finally {
      w.stop();
      bigModel.closeAllConnections();
      await new Promise((r) => bigModel.close(r));
    }
  }, 60_000);
});
