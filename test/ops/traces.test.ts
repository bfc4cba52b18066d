import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { workerMessage, type Job, type JobEvent, type JobSpanRecord } from "@svc/contract";
import { ConfigError, parseConfig } from "../../server/config.js";
import { onEachDatabase, onPGlite, onPostgres } from "../helpers/databases.js";
import { startTestServer, startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { connectWorkerDouble, answerNothing, closeRawWorkers, type WorkerDouble } from "../helpers/raw-worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.js";
import type WebSocket from "ws";

/**
 * OpenTelemetry traces, received the way a collector receives them: a real OTLP/HTTP
 * receiver (test/helpers/otlp-receiver.ts) taking the SDK's own exports (OTLP/JSON,
 * decoded with JSON.parse; the default http/protobuf checked on its bytes). The app's
 * request carries a W3C `traceparent`; the run's spans, the machine's (a real
 * `svc-worker` whose user allows traces, beside one whose user does not) and the
 * chat completion's join that trace. Tracing is process-wide, so each suite closes
 * its server (which flushes the spans) before the next starts its own.
 */

const OTEL = (receiver: OtlpReceiver, extra: Record<string, string> = {}) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  OTEL_SERVICE_NAME: "svc-under-test",
  OTEL_EXPORTER_OTLP_HEADERS: "x-collector-key=k%20123",
  OTEL_BSP_SCHEDULE_DELAY: "50",
  ...extra,
});

/** A fresh W3C trace context, as an app's own tracing would send it. */
function appTrace() {
  const traceId = randomBytes(16).toString("hex");
  const spanId = randomBytes(8).toString("hex");
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

const marker = (what: string) => `${what}-${randomBytes(6).toString("hex")}`;

/** An SDK client whose run starts (`POST /v1/runs`) carry `traceparent`, as an instrumented app server's would. */
function tracedSvc(server: TestServer, traceparent: string): Svc {
  return new Svc({
    apiKey: server.dev.appKey,
    baseUrl: `${server.url}/v1`,
    fetch: (input, init) => {
      const headers = new Headers(init?.headers);
      if (init?.method === "POST" && String(input).endsWith("/v1/runs")) headers.set("traceparent", traceparent);
      return fetch(input, { ...init, headers });
    },
  });
}

async function drain(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
  const events: RunEvent[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

const attr = (s: ReceivedSpan, key: string) => s.attributes[key];
const byStart = (a: ReceivedSpan, b: ReceivedSpan) => a.startMs - b.startMs;

/** The spans of one trace once `ready` holds for them. */
function traceOf(receiver: OtlpReceiver, traceId: string, ready: (spans: ReceivedSpan[]) => boolean, what: string): Promise<ReceivedSpan[]> {
  return pollUntil(async () => receiver.spans().filter((s) => s.traceId === traceId), ready, 20_000, what);
}

const runSpans = (spans: ReceivedSpan[], runId: string, op: string) => spans.filter((s) => attr(s, "gen_ai.conversation.id") === runId && attr(s, "gen_ai.operation.name") === op);

onEachDatabase("traces of runs on $db.name", (db) => {
  let receiver: OtlpReceiver;
  let model: ModelStandIn;
  let server: TestServer;
  const workers: WorkerProcess[] = [];
  const machines: Record<string, string> = {};

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    model = await startModelStandIn();
    server = await startTestServerOn(db, OTEL(receiver), { runningClock: true });
    // alice lets her machine send traces; bob keeps the default (off).
    const alice = await startModelMachine(server, server.dev, "alice", model.url, { policy: { telemetry: { traces: true } } });
    const bob = await startModelMachine(server, server.dev, "bob", model.url);
    workers.push(alice, bob);
    for (const user of ["alice", "bob"]) {
      const res = await server.fetch(`/v1/users/${user}/compute`, { headers: { authorization: `Bearer ${server.dev.appKey}` } });
      machines[user] = ((await res.json()) as { machines: { id: string }[] }).machines[0].id;
    }
  }, 90_000);
  afterAll(async () => {
    for (const w of workers) w.stop();
    await server?.close();
    await model?.close();
    await receiver?.close();
    removeTempDirs();
  });

  it("one trace from the app's traceparent: request → invoke_agent → chat per turn (→ the machine's spans), execute_tool, approval, ledger writes; GenAI attributes and tokens; no prompt text", async () => {
    const app = appTrace();
    const prompt = marker("prompt-text");
    const result = marker("tool-result");
    const svc = tracedSvc(server, app.traceparent);
    const run = svc.runs.create({
      user: "alice",
      prompt: `${prompt}: what is the weather? Then mail it.`,
      tools: [
        { name: "weather", parameters: { type: "object" }, run: () => ({ temp: result }) },
        { name: "send_mail", needsApproval: true, run: () => "mail sent" },
      ],
      onApproval: () => true,
    });
    const events = await drain(run);
    const done = await run.result();
    expect(done.status).toBe("completed");
    const runId = done.runId;
    const calls = Object.fromEntries(events.flatMap((e) => (e.kind === "tool_call" ? [[e.name, e.callId]] : [])));
    const stored = await svc.runs.get(runId);

    const spans = await traceOf(
      receiver,
      app.traceId,
      (s) => s.some((x) => x.name === "POST /v1/runs") && runSpans(s, runId, "invoke_agent").length === 1 && s.filter((x) => attr(x, "svc.origin") === "machine").length === 3,
      "the run's whole trace",
    );
    // The request, under the app's own span.
    const request = spans.find((s) => s.name === "POST /v1/runs")!;
    expect(request).toMatchObject({ parentSpanId: app.spanId, kind: 2 });
    expect(request.attributes).toMatchObject({ "http.request.method": "POST", "http.route": "/v1/runs", "url.path": "/v1/runs", "http.response.status_code": 200 });
    expect(request.resource["service.name"]).toBe("svc-under-test");

    // The run, under the request.
    const [agent] = runSpans(spans, runId, "invoke_agent");
    expect(agent.name).toBe(`invoke_agent ${stored.model}`);
    expect(agent.parentSpanId).toBe(request.spanId);
    expect(agent.attributes).toMatchObject({
      "gen_ai.provider.name": "svc",
      "gen_ai.request.model": stored.model,
      "gen_ai.conversation.id": runId,
      "svc.route": "user-hardware",
      "svc.cost_class": "user_hardware",
      "svc.user": "alice",
      "svc.machine.id": machines.alice,
      "svc.runtime": "ollama",
      "svc.run.status": "completed",
      "gen_ai.usage.input_tokens": 36,
      "gen_ai.usage.output_tokens": 21,
      "gen_ai.response.finish_reasons": ["end_turn"],
    });
    expect(agent.endMs).toBeGreaterThanOrEqual(agent.startMs);

    // A chat span per model turn, with the turn's tokens as the stand-in reported them.
    const chats = runSpans(spans, runId, "chat").sort(byStart);
    expect(chats.map((c) => [c.name, c.parentSpanId, c.kind, attr(c, "svc.turn"), attr(c, "gen_ai.provider.name")])).toEqual([1, 2, 3].map((t) => [`chat ${stored.model}`, agent.spanId, 3, t, "ollama"]));
    expect(chats.map((c) => [attr(c, "gen_ai.usage.input_tokens"), attr(c, "gen_ai.usage.output_tokens"), attr(c, "gen_ai.response.finish_reasons")])).toEqual([
      [12, 7, ["tool_calls"]],
      [12, 7, ["tool_calls"]],
      [12, 7, ["stop"]],
    ]);

    // The app's tool calls and the approval wait, beside the turns.
    const tools = runSpans(spans, runId, "execute_tool").sort(byStart);
    expect(tools.map((t) => [t.name, t.parentSpanId, attr(t, "gen_ai.tool.name"), attr(t, "gen_ai.tool.call.id"), attr(t, "gen_ai.tool.type")])).toEqual([
      ["execute_tool weather", agent.spanId, "weather", calls.weather, "function"],
      ["execute_tool send_mail", agent.spanId, "send_mail", calls.send_mail, "function"],
    ]);
    const approvals = spans.filter((s) => s.name.startsWith("approval "));
    expect(approvals.map((a) => [a.name, a.parentSpanId, attr(a, "svc.approval.kind"), attr(a, "gen_ai.tool.call.id"), attr(a, "svc.approval.decision")])).toEqual([["approval send_mail", agent.spanId, "tool", calls.send_mail, "allow"]]);
    // The mail is handed to the app once it was allowed; the weather's result came before the second turn began.
    expect(approvals[0].endMs).toBeLessThanOrEqual(tools[1].startMs);
    expect(tools[0].endMs).toBeLessThanOrEqual(chats[1].startMs);

    // The ledger: the run counted as the request started it, then a row per turn.
    const ledger = spans.filter((s) => s.name === "svc.ledger.write");
    expect(ledger.filter((l) => l.parentSpanId === request.spanId).map((l) => [attr(l, "svc.ledger.kind"), attr(l, "svc.ledger.rows")])).toEqual([["run", 1]]);
    expect(ledger.filter((l) => l.parentSpanId === agent.spanId).map((l) => attr(l, "svc.ledger.rows"))).toEqual([1, 1, 1]);

    // The machine's own spans: one per job (each model turn), under that turn's chat span, within it.
    const machine = spans.filter((s) => attr(s, "svc.origin") === "machine").sort(byStart);
    expect(machine.map((m) => [m.name, m.kind, m.parentSpanId, attr(m, "svc.machine.id"), attr(m, "svc.worker.input_tokens"), attr(m, "svc.worker.output_tokens")])).toEqual(
      chats.map((c) => ["model_turn ollama", 3, c.spanId, machines.alice, 12, 7]),
    );
    for (const [i, m] of machine.entries()) {
      expect(m.startMs).toBeGreaterThanOrEqual(chats[i].startMs);
      // Re-made from the machine's own durations after its job's sending: under load the worker ends its span a little after the service saw `done`.
      expect(m.endMs).toBeLessThanOrEqual(chats[i].endMs + 50);
      expect(attr(m, "gen_ai.response.time_to_first_chunk")).toEqual(expect.any(Number));
    }

    // Every span of the run is in the app's trace; nothing of the prompt, the tool's arguments or its result went anywhere.
    expect(receiver.spans().filter((s) => attr(s, "gen_ai.conversation.id") === runId && s.traceId !== app.traceId)).toEqual([]);
    const exported = receiver.text();
    expect(exported).toContain(runId);
    expect(exported).not.toContain(prompt);
    expect(exported).not.toContain(result);
    expect(exported).not.toContain("Paris");
    expect(receiver.requests.every((r) => r.headers["x-collector-key"] === "k 123" && r.contentType === "application/json")).toBe(true);
  });

  it("the machine's spans come only from a machine whose user allows traces: bob's run has the service's spans and none of his machine's, beside alice's", async () => {
    const traces = { alice: appTrace(), bob: appTrace() };
    const runs = await Promise.all(
      (["alice", "bob"] as const).map(async (user) => {
        const run = tracedSvc(server, traces[user].traceparent).runs.create({ user, prompt: "Just say hello." });
        await drain(run);
        return run.result();
      }),
    );
    expect(runs.map((r) => r.status)).toEqual(["completed", "completed"]);
    const alice = await traceOf(receiver, traces.alice.traceId, (s) => s.some((x) => attr(x, "svc.origin") === "machine") && runSpans(s, runs[0].runId, "invoke_agent").length === 1, "alice's trace");
    const bob = await traceOf(receiver, traces.bob.traceId, (s) => runSpans(s, runs[1].runId, "invoke_agent").length === 1 && runSpans(s, runs[1].runId, "chat").length === 1, "bob's trace");
    const [aliceChat] = runSpans(alice, runs[0].runId, "chat");
    expect(alice.filter((s) => attr(s, "svc.origin") === "machine").map((s) => [s.name, s.parentSpanId, attr(s, "svc.machine.id")])).toEqual([["model_turn ollama", aliceChat.spanId, machines.alice]]);
    // Bob's machine ran the same job and sent nothing: his trace is the service's spans only.
    expect(runSpans(bob, runs[1].runId, "invoke_agent")[0].attributes).toMatchObject({ "svc.user": "bob", "svc.machine.id": machines.bob, "svc.run.status": "completed" });
    // (Alice's came before her run's end was written: bob's would have too.)
    expect(bob.filter((s) => attr(s, "svc.origin") === "machine")).toEqual([]);
    expect(receiver.spans().filter((s) => attr(s, "svc.origin") === "machine" && attr(s, "svc.machine.id") === machines.bob)).toEqual([]);
  });

  it("a chat completion goes through a run and gets the same spans: request → invoke_agent → chat → the machine's span", async () => {
    const app = appTrace();
    const prompt = marker("chat-prompt");
    const res = await server.fetch("/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json", traceparent: app.traceparent },
      body: JSON.stringify({ model: "auto", user: "alice", messages: [{ role: "user", content: prompt }], max_tokens: 50 }),
    });
    expect(res.status).toBe(200);
    const runId = res.headers.get("service-run-id")!;
    const spans = await traceOf(receiver, app.traceId, (s) => s.some((x) => x.name === "POST /v1/chat/completions") && s.some((x) => attr(x, "svc.origin") === "machine") && runSpans(s, runId, "invoke_agent").length === 1, "the completion's trace");
    const request = spans.find((s) => s.name === "POST /v1/chat/completions")!;
    expect(request.parentSpanId).toBe(app.spanId);
    expect(request.attributes).toMatchObject({ "http.route": "/v1/chat/completions", "http.response.status_code": 200 });
    const [agent] = runSpans(spans, runId, "invoke_agent");
    expect(agent.parentSpanId).toBe(request.spanId);
    expect(agent.attributes).toMatchObject({ "svc.run.source": "chat", "svc.user": "alice", "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 7 });
    const [chat] = runSpans(spans, runId, "chat");
    expect(chat.parentSpanId).toBe(agent.spanId);
    expect(chat.attributes).toMatchObject({ "gen_ai.request.max_tokens": 50, "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 7, "gen_ai.response.finish_reasons": ["stop"] });
    const machine = spans.filter((s) => attr(s, "svc.origin") === "machine");
    expect(machine.map((m) => [m.name, m.parentSpanId])).toEqual([["model_turn ollama", chat.spanId]]);
    expect(spans.filter((s) => s.name === "svc.ledger.write").map((l) => l.parentSpanId).sort()).toEqual([request.spanId, agent.spanId].sort());
    expect(receiver.text()).not.toContain(prompt);
  });
});

onPGlite("a machine's spans are bounded to its own job on $db.name", (db) => {
  let receiver: OtlpReceiver;
  let server: TestServer;
  const open: WebSocket[] = [];
  let mallory: WorkerDouble;
  let other: WorkerDouble;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    server = await startTestServerOn(db, OTEL(receiver), { runningClock: true });
    const m = await pairViaApi(server, server.dev, "mallory");
    const o = await pairViaApi(server, server.dev, "oscar");
    mallory = await connectWorkerDouble(server.url, m.token, answerNothing, undefined, open);
    other = await connectWorkerDouble(server.url, o.token, answerNothing, undefined, open);
  }, 60_000);
  afterAll(async () => {
    await closeRawWorkers(open);
    await server?.close();
    await receiver?.close();
    removeTempDirs();
  });

  it("the job carries the chat span's traceparent; the spans sent come back under it, stripped of content and of the service's attributes; another machine's or a second batch is refused", async () => {
    const app = appTrace();
    const res = await fetch(`${server.url}/v1/runs`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json", traceparent: app.traceparent },
      body: JSON.stringify({ user: "mallory", prompt: "hello" }),
    });
    const runId = res.headers.get("service-run-id")!;
    void res.body?.cancel();
    const [sent] = await mallory.waitJobs(1);
    const traceparent = (sent as { traceparent?: string }).traceparent;
    expect(traceparent).toMatch(new RegExp(`^00-${app.traceId}-[0-9a-f]{16}-01$`));
    const jobSpanId = traceparent!.split("-")[2];

    // Another machine cannot place spans in this job (nor learn anything: it is refused as an unknown job).
    other.send(workerMessage("job_spans", { jobId: sent.jobId, sentAt: Date.now(), spans: [{ name: "injected", start: Date.now(), end: Date.now() }] }));
    expect((await other.next("error")).payload.message).toContain(`no job ${sent.jobId} is running on this machine`);

    const now = Date.now();
    const records: JobSpanRecord[] = [
      { id: "a", name: "outer", start: now - 40, end: now - 5, attributes: { "svc.worker.note": "x".repeat(1000), "gen_ai.input.messages": "secret prompt", "svc.user": "someone-else", "gen_ai.tool.name": "grep" } },
      { id: "b", parent: "a", name: "inner", kind: "client", start: now - 30, end: now - 10, status: { code: "error", message: "it broke" } },
      // A parent it does not have, and fields the catalog does not know (a trace id of its own choosing): under the job's span all the same.
      { parent: "elsewhere", name: "stray", start: now - 20, end: now - 15, traceId: "ffffffffffffffffffffffffffffffff" } as JobSpanRecord,
    ];
    // Past the catalog's bounds (a value over 1,024 characters, more than 128 spans): refused whole, and the job may still send its spans.
    mallory.send(workerMessage("job_spans", { jobId: sent.jobId, sentAt: now, spans: [{ name: "big", start: now, end: now, attributes: { "svc.worker.note": "x".repeat(2000) } }] }));
    expect((await mallory.next("error")).payload.message).toContain("at most 1024 character(s)");
    mallory.send(workerMessage("job_spans", { jobId: sent.jobId, sentAt: now, spans: Array.from({ length: 129 }, () => ({ name: "many", start: now, end: now })) }));
    expect((await mallory.next("error")).payload.message).toContain("spans");
    mallory.send(workerMessage("job_spans", { jobId: sent.jobId, sentAt: now, spans: records }));
    // Once per job.
    mallory.send(workerMessage("job_spans", { jobId: sent.jobId, sentAt: now, spans: records }));
    expect((await mallory.next("error")).payload.message).toContain("already sent");
    mallory.send(workerMessage("job_event", { jobId: sent.jobId, event: { type: "done", finishReason: "stop", output: "hi", usage: { inputTokens: 1, outputTokens: 1 } } }));

    const spans = await traceOf(receiver, app.traceId, (s) => runSpans(s, runId, "invoke_agent").length === 1 && s.some((x) => x.name === "stray"), "the job's trace");
    const [chat] = runSpans(spans, runId, "chat");
    expect(chat.spanId).toBe(jobSpanId);
    const fromMachine = spans.filter((s) => attr(s, "svc.origin") === "machine");
    const named = Object.fromEntries(fromMachine.map((s) => [s.name, s]));
    expect(Object.keys(named).sort()).toEqual(["inner", "outer", "stray"]);
    expect(named.outer.parentSpanId).toBe(chat.spanId);
    expect(named.inner.parentSpanId).toBe(named.outer.spanId);
    expect(named.stray.parentSpanId).toBe(chat.spanId);
    expect(fromMachine.every((s) => s.traceId === app.traceId && attr(s, "svc.machine.id") === mallory.machineId)).toBe(true);
    expect(named.outer.attributes["svc.worker.note"]).toBe("x".repeat(256));
    expect(named.outer.attributes["gen_ai.tool.name"]).toBe("grep");
    expect(named.outer.attributes).not.toHaveProperty("gen_ai.input.messages");
    expect(named.outer.attributes).not.toHaveProperty("svc.user");
    expect(named.inner).toMatchObject({ kind: 3, status: { code: 2, message: "it broke" } });
    // Kept within the job's span.
    for (const s of fromMachine) expect(s.startMs).toBeGreaterThanOrEqual(chat.startMs);
    expect(receiver.spans().filter((s) => ["injected", "big", "many"].includes(s.name))).toEqual([]);
    // The second batch was refused: each record came once.
    expect(fromMachine).toHaveLength(3);
    expect(receiver.text()).not.toContain("secret prompt");
    expect(receiver.text()).not.toContain("someone-else");
  });
});

onPostgres("a run taken over by another instance, traced", (postgres) => {
  let receiver: OtlpReceiver;
  let a: TestServer;
  let b: TestServer;
  let drop: () => Promise<void>;
  let closedA = false;
  const open: WebSocket[] = [];
  // A model turn offered tools calls the first one, until a result came back; then it answers.
  function answer(job: Job): JobEvent[] {
    const usage = { inputTokens: 5, outputTokens: 3 };
    if (job.kind === "model_turn" && job.tools?.length && job.messages.at(-1)?.role !== "tool") {
      return [
        { type: "tool_call", id: "c1", name: job.tools[0].function.name, arguments: "{}" },
        { type: "done", finishReason: "tool_calls", output: "", usage },
      ];
    }
    return [
      { type: "text_delta", text: "over" },
      { type: "done", finishReason: "stop", output: "over", usage },
    ];
  }

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    const made = await postgres.create({ migrated: true });
    drop = made.drop;
    const env = OTEL(receiver, { RUN_LEASE_SECONDS: "1" });
    a = await startTestServer(made.target, env, { runningClock: true });
    b = await startTestServer(made.target, { ...env, SVC_DEV_APP: "" }, { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    await closeRawWorkers(open);
    if (!closedA) await a?.close();
    await b?.close();
    await drop?.();
    await receiver?.close();
    removeTempDirs();
  });

  it("the instance taking the run over continues the same trace: its invoke_agent is a child of the request too, marked resumed; the first one's says it moved", async () => {
    const m = await pairViaApi(a, a.dev, "trudy");
    const first = await connectWorkerDouble(a.url, m.token, answer, undefined, open);
    const app = appTrace();
    const keys = { authorization: `Bearer ${a.dev.appKey}`, "content-type": "application/json" };
    const res = await a.fetch("/v1/runs", { method: "POST", headers: { ...keys, traceparent: app.traceparent }, body: JSON.stringify({ user: "trudy", prompt: "look it up", tools: [{ name: "lookup" }] }) });
    const runId = res.headers.get("service-run-id")!;
    void res.body?.cancel();
    await first.waitJobs(1);
    const waiting = await pollUntil(() => a.db.query<{ status: string }>("SELECT status::text AS status FROM runs WHERE id = $1", [runId]), (r) => r[0]?.status === "waiting", 10_000, "the run waiting on its tool");
    expect(waiting[0].status).toBe("waiting");
    // A goes away with the run's lease (its close lets it lapse, as a crash would); the machine comes back on B, which takes the run over.
    await a.close();
    closedA = true;
    await connectWorkerDouble(b.url, m.token, answer, undefined, open);
    const [{ call_id: callId }] = await b.db.query<{ call_id: string }>("SELECT call_id FROM tool_calls WHERE run_id = $1", [runId]);
    await pollUntil(() => b.db.query<{ lease_owner: string | null }>("SELECT lease_owner FROM runs WHERE id = $1", [runId]), (r) => r[0]?.lease_owner === b.services.runEngine.instance, 15_000, "B to take the run over");
    const answered = await b.fetch(`/v1/runs/${runId}/tool_result`, { method: "POST", headers: keys, body: JSON.stringify({ callId, result: "found" }) });
    expect(answered.status).toBe(200);
    await pollUntil(() => b.db.query<{ status: string }>("SELECT status::text AS status FROM runs WHERE id = $1", [runId]), (r) => r[0]?.status === "completed", 15_000, "the run to complete on B");

    const spans = await traceOf(receiver, app.traceId, (x) => runSpans(x, runId, "invoke_agent").length === 2 && runSpans(x, runId, "chat").length === 2, "both instances' spans");
    const request = spans.find((x) => x.name === "POST /v1/runs")!;
    const agents = runSpans(spans, runId, "invoke_agent").sort(byStart);
    expect(agents.map((g) => [g.parentSpanId, attr(g, "svc.run.status"), attr(g, "svc.run.resumed")])).toEqual([
      [request.spanId, "moved", undefined],
      [request.spanId, "completed", true],
    ]);
    expect(attr(agents[0], "svc.instance")).toBe(a.services.runEngine.instance);
    expect(attr(agents[1], "svc.instance")).toBe(b.services.runEngine.instance);
    // Each turn under the instance that ran it; the tool call open on A ended with it.
    const chats = runSpans(spans, runId, "chat").sort(byStart);
    expect(chats.map((c) => [c.parentSpanId, attr(c, "svc.turn")])).toEqual([
      [agents[0].spanId, 1],
      [agents[1].spanId, 2],
    ]);
    const [tool] = runSpans(spans, runId, "execute_tool");
    expect(tool).toMatchObject({ parentSpanId: agents[0].spanId, attributes: expect.objectContaining({ "svc.ended_by": "run moved" }) });
  });
});

onPGlite("content in spans only with the operator's opt-in on $db.name", (db) => {
  let receiver: OtlpReceiver;
  let server: TestServer;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    server = await startTestServerOn(db, OTEL(receiver, { OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: "true" }), { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await receiver?.close();
  });

  it("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true: the chat spans carry gen_ai.input/output.messages and execute_tool its arguments and result", async () => {
    const app = appTrace();
    const said = marker("said");
    const result = marker("tool-result");
    const svc = tracedSvc(server, app.traceparent);
    const run = svc.runs.create({
      user: "carol",
      model: "svc/echo",
      prompt: JSON.stringify([{ say: said }, { call: "weather", arguments: { city: "Paris" } }, { say: "It is {{result}}." }]),
      tools: [{ name: "weather", run: () => result }],
    });
    await drain(run);
    const { runId, status } = await run.result();
    expect(status).toBe("completed");
    const spans = await traceOf(receiver, app.traceId, (s) => runSpans(s, runId, "invoke_agent").length === 1 && runSpans(s, runId, "chat").length === 2, "the run's trace");
    const chats = runSpans(spans, runId, "chat").sort(byStart);
    const input = chats[0].attributes["gen_ai.input.messages"] as { role: string; parts: { type: string; content?: string }[] }[];
    expect(input.at(-1)).toMatchObject({ role: "user", parts: [{ type: "text", content: expect.stringContaining(said) }] });
    expect(chats[0].attributes["gen_ai.output.messages"]).toMatchObject([{ role: "assistant", finish_reason: "tool_calls", parts: expect.arrayContaining([expect.objectContaining({ type: "tool_call", name: "weather", arguments: { city: "Paris" } })]) }]);
    // The second turn sees the tool's answer; its output says it.
    expect(JSON.stringify(chats[1].attributes["gen_ai.input.messages"])).toContain(result);
    expect(JSON.stringify(chats[1].attributes["gen_ai.output.messages"])).toContain(result);
    const [tool] = runSpans(spans, runId, "execute_tool");
    expect(tool.attributes).toMatchObject({ "gen_ai.tool.call.arguments": { city: "Paris" }, "gen_ai.tool.call.result": result });
    expect(receiver.text()).toContain(said);
  });
});

onPGlite("traces off on $db.name", (db) => {
  let receiver: OtlpReceiver;
  const open: WebSocket[] = [];

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
  });
  afterAll(async () => {
    await closeRawWorkers(open);
    await receiver?.close();
    removeTempDirs();
  });

  /** A run on a machine double and a chat completion on svc/echo, each with a traceparent; then the server closes (which would flush any span). */
  async function exercise(env: Record<string, string>) {
    const server = await startTestServerOn(db, env, { runningClock: true });
    try {
      const m = await pairViaApi(server, server.dev, "dora");
      const double = await connectWorkerDouble(server.url, m.token, () => [{ type: "done", finishReason: "stop", output: "ok", usage: { inputTokens: 1, outputTokens: 1 } }], undefined, open);
      const { traceparent } = appTrace();
      const headers = { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json", traceparent };
      const res = await server.fetch("/v1/runs", { method: "POST", headers, body: JSON.stringify({ user: "dora", prompt: "hello" }) });
      expect(res.status).toBe(200);
      const runId = res.headers.get("service-run-id")!;
      await res.text();
      const chat = await server.fetch("/v1/chat/completions", { method: "POST", headers, body: JSON.stringify({ model: "svc/echo", user: "dora", messages: [{ role: "user", content: "hi" }] }) });
      expect(chat.status).toBe(200);
      const [job] = await double.waitJobs(1);
      const row = await pollUntil(() => server.db.prisma.run.findUniqueOrThrow({ where: { id: runId } }), (r) => r.status === "completed", 10_000, "the run to complete");
      await double.close();
      return { job: job as { traceparent?: string }, request: row.request as Record<string, unknown> };
    } finally {
      await server.close();
    }
  }

  it("with no OTEL_* variable: nothing is set up or exported, the job carries no traceparent, the run keeps no trace context, everything works", async () => {
    const { job, request } = await exercise({});
    expect(job).not.toHaveProperty("traceparent");
    expect(request).not.toHaveProperty("otel");
  });

  it("OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn traces off even with an endpoint: the receiver gets nothing", async () => {
    for (const off of [{ OTEL_SDK_DISABLED: "true" }, { OTEL_TRACES_EXPORTER: "none" }] as Record<string, string>[]) {
      const { job, request } = await exercise(OTEL(receiver, off));
      expect(job).not.toHaveProperty("traceparent");
      expect(request).not.toHaveProperty("otel");
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(receiver.requests).toEqual([]);
  });
});

onPGlite("the default protocol on $db.name", (db) => {
  let receiver: OtlpReceiver;
  let server: TestServer;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    server = await startTestServerOn(db, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`, OTEL_BSP_SCHEDULE_DELAY: "50" });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await receiver?.close();
  });

  it("is http/protobuf (the spec's default): a request's span reaches the receiver as protobuf, in the caller's trace", async () => {
    const app = appTrace();
    expect((await server.fetch("/healthz", { headers: { traceparent: app.traceparent } })).status).toBe(200);
    const request = await pollUntil(async () => receiver.requests.find((r) => r.body.includes(Buffer.from(app.traceId, "hex"))), (r) => r !== undefined, 10_000, "a protobuf export");
    expect(request!.contentType).toBe("application/x-protobuf");
    // Protobuf strings are their UTF-8 bytes: the span's name and the caller's span id (its parent) are in the body.
    expect(request!.body.includes(Buffer.from("GET /healthz"))).toBe(true);
    expect(request!.body.includes(Buffer.from(app.spanId, "hex"))).toBe(true);
  });
});

describe("the OTEL_* configuration", () => {
  const parse = (env: Record<string, string>) => parseConfig({ SVC_DATA_DIR: "/tmp/svc-otel-config", ...env }).telemetry;

  it("is off by default, on with an endpoint; the traces endpoint is used as given, the general one gets /v1/traces", () => {
    expect(parse({})).toEqual({ traces: null, captureContent: false });
    expect(parse({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" }).traces).toMatchObject({ url: "http://collector:4318/v1/traces", protocol: "http/protobuf", resource: { "service.name": "svc" } });
    expect(parse({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://b/otlp/traces" }).traces?.url).toBe("https://b/otlp/traces");
    expect(parse({ OTEL_TRACES_EXPORTER: "otlp" }).traces?.url).toBe("http://localhost:4318/v1/traces");
    expect(parse({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_SDK_DISABLED: "TRUE" }).traces).toBeNull();
    expect(parse({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_TRACES_EXPORTER: "none" }).traces).toBeNull();
    const t = parse({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318",
      OTEL_EXPORTER_OTLP_HEADERS: "api-key=one,x-a=b%3Dc",
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: "api-key=two",
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=prod,service.name=ignored",
      OTEL_SERVICE_NAME: "svc-eu",
      OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
      OTEL_TRACES_SAMPLER_ARG: "0.25",
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: "true",
    });
    expect(t.captureContent).toBe(true);
    expect(t.traces).toMatchObject({ protocol: "http/json", headers: { "api-key": "two", "x-a": "b=c" }, resource: { "service.name": "svc-eu", "deployment.environment.name": "prod" }, sampler: { name: "parentbased_traceidratio", ratio: 0.25 } });
  });

  it("refuses what it cannot honour, naming the variable and never echoing a header's value", () => {
    const problems = (env: Record<string, string>) => {
      try {
        parse(env);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as ConfigError).problems.join("\n");
      }
      throw new Error("accepted");
    };
    expect(problems({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4317", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toContain("OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf or http/json");
    expect(problems({ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" })).toContain("OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL");
    expect(problems({ OTEL_TRACES_EXPORTER: "zipkin" })).toContain("OTEL_TRACES_EXPORTER: only otlp or none");
    const headers = problems({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_EXPORTER_OTLP_HEADERS: "api-key=fine,supersecretvalue" });
    expect(headers).toContain("OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value");
    expect(headers).not.toContain("supersecretvalue");
    expect(problems({ OTEL_SDK_DISABLED: "yes" })).toContain("OTEL_SDK_DISABLED: must be true or false");
  });
});
