import { describe, it, expect } from "vitest";
import { Svc, BadRequestError, ConnectionError, MalformedEventError, NotFoundError, PaymentRequiredError, ServeInAppError, UserAbortError, type RunEvent } from "@svc/sdk";

/**
 * The SDK's run driver against a scripted service: the cases the real server
 * does not produce on demand (a 503 on an answer, a frame cut mid-way, malformed
 * events, reconnects running out). The real server's paths are in runs.test.ts.
 */
interface Req { method: string; url: string; headers: Headers; body: any }
type Handler = (req: Req, signal?: AbortSignal | null) => Response | Promise<Response>;

function sse(runId: string | null = "run_1") {
  let ctrl!: ReadableStreamDefaultController<Uint8Array>;
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({ start: (c) => void (ctrl = c) });
  const headers: Record<string, string> = { "content-type": "text/event-stream" };
  if (runId) headers["service-run-id"] = runId;
  return {
    response: new Response(body, { headers }),
    send(id: number, data: Record<string, unknown>) { ctrl.enqueue(enc.encode(`id: ${id}\nevent: ${data.kind}\ndata: ${JSON.stringify(data)}\n\n`)); },
    raw(t: string) { ctrl.enqueue(enc.encode(t)); },
    end() { ctrl.close(); },
    drop() { ctrl.error(new TypeError("terminated")); },
    abortWith(signal?: AbortSignal | null) { signal?.addEventListener("abort", () => { try { ctrl.error(signal.reason); } catch {} }); },
  };
}
const json = (status: number, body: unknown, headers: Record<string, string> = {}) => Response.json(body, { status, headers });
const envelope = (code: string) => ({ error: { type: "x", code, message: `msg ${code}`, requestId: "req_1" } });
const ok = (req: Req) => json(200, { runId: "run_1", callId: req.body?.callId, approvalId: req.body?.approvalId, accepted: true, decision: req.body?.decision });

function fake(handler: Handler, options: { maxRetries?: number } = {}) {
  const calls: Req[] = [];
  const fetchFn = (async (input: any, init?: RequestInit) => {
    const url = typeof input === "string" ? input : input.url;
    const req: Req = { method: init?.method ?? "GET", url: url.replace("http://svc.test", ""), headers: new Headers(init?.headers as any), body: init?.body ? JSON.parse(init.body as string) : undefined };
    calls.push(req);
    if (init?.signal?.aborted) throw init.signal.reason;
    return handler(req, init?.signal);
  }) as typeof fetch;
  const svc = new Svc({ apiKey: "sk_svc_x.y", baseUrl: "http://svc.test/v1", fetch: fetchFn, maxReconnects: 3, ...options });
  return { svc, calls, posts: (suffix: string) => calls.filter((c) => c.method === "POST" && c.url.endsWith(suffix)) };
}
const started = { kind: "run_started", runId: "run_1", route: "user-hardware", costClass: "user_hardware", machineId: "m1", runtime: "ollama", model: "llama" };
const usage = { inputTokens: 7, outputTokens: 3, costClass: "user_hardware", amountMicros: 0 };
const completed = { kind: "run_completed", output: "done", usage, stopReason: "end_turn" };
const call = (callId: string, name: string, args: unknown = {}) => ({ kind: "tool_call", callId, name, arguments: args, deadlineAt: "2030-01-01T00:00:00Z" });
const approval = (approvalId: string, tool = "t") => ({ kind: "approval_request", approvalId, what: "tool", tool, arguments: {}, deadlineAt: "2030-01-01T00:00:00Z" });
const tick = (ms = 20) => new Promise((r) => setTimeout(r, ms));
const kinds = async (run: AsyncIterable<RunEvent>) => { const k: string[] = []; for await (const e of run) k.push(e.kind); return k; };

describe("run driver", () => {
  it("answers tools: value, thrown error, unknown tool, tool without run; undefined becomes null", async () => {
    const s = sse();
    const { svc, posts } = fake((req) => (req.url === "/v1/runs" ? s.response : ok(req)));
    const run = svc.runs.create({
      user: "alice", prompt: "p",
      tools: [
        { name: "good", run: (args) => ({ echo: args }) },
        { name: "bad", run: () => { throw new Error("boom"); } },
        { name: "norun" },
        { name: "void", run: () => undefined },
      ],
    });
    expect(await run.runId).toBe("run_1");
    s.send(1, started);
    s.send(2, call("c1", "good", { a: 1 }));
    s.send(3, call("c2", "bad"));
    s.send(4, call("c3", "missing"));
    s.send(5, call("c4", "norun"));
    s.send(6, call("c5", "void"));
    await tick(50);
    s.send(7, completed); s.end();
    const result = await run.result();
    expect(result).toEqual({ runId: "run_1", status: "completed", output: "done", usage: { inputTokens: 7, outputTokens: 3 }, route: "user-hardware", machineId: "m1", runtime: "ollama", stopReason: "end_turn" });
    const bodies = Object.fromEntries(posts("/tool_result").map((p) => [p.body.callId, p.body]));
    expect(bodies.c1).toEqual({ callId: "c1", user: "alice", result: { echo: { a: 1 } } });
    expect(bodies.c2).toEqual({ callId: "c2", user: "alice", result: { error: "boom" }, isError: true });
    expect(bodies.c3.result.error).toMatch(/no tool named "missing"/);
    expect(bodies.c4.result.error).toMatch(/"norun" has no run function/);
    expect(bodies.c5).toEqual({ callId: "c5", user: "alice", result: null });
    expect(await kinds(run)).toEqual(["run_started", "tool_call", "tool_call", "tool_call", "tool_call", "tool_call", "run_completed"]);
  });

  it("answers approvals: true, deny object, no handler, throwing handler", async () => {
    for (const [onApproval, expected] of [
      [() => true, { decision: "allow" }],
      [() => ({ decision: "allow", reason: "fine" }), { decision: "allow", reason: "fine" }],
      [async () => false, { decision: "deny" }],
      [() => ({ decision: "nope", reason: "r" }), { decision: "deny", reason: "r" }],
      [undefined, { decision: "deny", reason: "the app has no approval handler" }],
      [() => { throw new Error("bad handler"); }, { decision: "deny", reason: "bad handler" }],
    ] as const) {
      const s = sse();
      const { svc, posts } = fake((req) => (req.url === "/v1/runs" ? s.response : ok(req)));
      const run = svc.runs.create({ user: "u", prompt: "p", onApproval: onApproval as any });
      s.send(1, started); s.send(2, approval("a1")); await tick(); s.send(3, completed); s.end();
      await run.result();
      expect(posts("/approval").map((p) => p.body)).toEqual([{ approvalId: "a1", user: "u", ...expected }]);
    }
  });

  it("ignores 409 already_answered / run_finished, retries a 503, surfaces a 400 after the events before it", async () => {
    const s = sse();
    let n = 0;
    const { svc, posts } = fake((req) => {
      if (req.url === "/v1/runs") return s.response;
      if (req.body.callId === "c1") return json(409, envelope("already_answered"));
      if (req.body.callId === "c2") return json(409, envelope("run_finished"));
      if (req.body.callId === "c3") return ++n === 1 ? json(503, envelope("service_unavailable")) : ok(req);
      return json(400, envelope("invalid_request"));
    });
    const run = svc.runs.create({ user: "u", prompt: "p", tools: [{ name: "t", run: () => 1 }] });
    const seen: string[] = [];
    const iter = (async () => { for await (const e of run) seen.push(e.kind); })();
    s.send(1, started); s.send(2, call("c1", "t")); s.send(3, call("c2", "t")); s.send(4, call("c3", "t"));
    await tick(400);
    expect(posts("/tool_result")).toHaveLength(4);
    s.send(5, call("c4", "t"));
    await expect(iter).rejects.toBeInstanceOf(BadRequestError);
    await expect(run.result()).rejects.toBeInstanceOf(BadRequestError);
    expect(seen).toEqual(["run_started", "tool_call", "tool_call", "tool_call", "tool_call"]);
  });

  it("re-attaches with Last-Event-ID, drops repeats, never answers twice, resets the budget on progress", async () => {
    const streams = [sse(), sse(), sse()];
    let i = 0;
    const { svc, calls, posts } = fake((req) => (req.method === "GET" || req.url === "/v1/runs" ? streams[i++].response : ok(req)));
    const run = svc.runs.create({ user: "u", prompt: "p", tools: [{ name: "t", run: () => "r" }] });
    streams[0].send(1, started); streams[0].send(2, call("c1", "t")); streams[0].raw("id: 3\ndata: {\"kind\""); await tick(); streams[0].drop();
    await tick(300);
    streams[1].send(1, started); streams[1].send(2, call("c1", "t")); streams[1].send(3, { kind: "text_delta", turn: 1, text: "hi" }); streams[1].end();
    await tick(300);
    streams[2].send(4, { kind: "unknown_future" }); streams[2].send(5, completed); streams[2].end();
    expect(await kinds(run)).toEqual(["run_started", "tool_call", "text_delta", "run_completed"]);
    expect(calls.filter((c) => c.method === "GET").map((c) => c.headers.get("last-event-id"))).toEqual(["2", "3"]);
    expect(posts("/tool_result")).toHaveLength(1);
    expect(run.lastEventId).toBe(5);
    expect(calls.filter((c) => c.url === "/v1/runs")).toHaveLength(1);
  });

  it("gives up after maxReconnects with a ConnectionError; a 404 on re-attach is thrown at once", async () => {
    const s = sse();
    const { svc, calls } = fake((req) => (req.url === "/v1/runs" ? s.response : Promise.reject(new TypeError("fetch failed"))));
    const run = svc.runs.create({ user: "u", prompt: "p" });
    s.send(1, started); await tick(); s.drop();
    const err = await run.result().catch((e) => e);
    expect(err).toBeInstanceOf(ConnectionError);
    expect(err.message).toMatch(/3 attempt\(s\).*runs\.events\("run_1", \{ after: 1 \}\)/);
    expect(calls.filter((c) => c.method === "GET")).toHaveLength(3);

    const s2 = sse();
    const f2 = fake((req) => (req.url === "/v1/runs" ? s2.response : json(404, envelope("not_found"))));
    const run2 = f2.svc.runs.create({ user: "u", prompt: "p" });
    s2.end();
    await expect(run2.result()).rejects.toBeInstanceOf(NotFoundError);
  });

  it("abort stops reading and the tools, without cancelling; leaving the loop does the same", async () => {
    const s = sse();
    let toolSignal!: AbortSignal;
    const { svc, calls } = fake((req, signal) => { if (req.url === "/v1/runs") { s.abortWith(signal); return s.response; } return ok(req); });
    const ac = new AbortController();
    const run = svc.runs.create({ user: "u", prompt: "p", signal: ac.signal, tools: [{ name: "t", run: (_a, ctx) => { toolSignal = ctx.signal; return new Promise(() => {}); } }] });
    s.send(1, started); s.send(2, call("c1", "t")); await tick();
    ac.abort();
    await expect(run.result()).rejects.toBeInstanceOf(UserAbortError);
    expect(toolSignal.aborted).toBe(true);
    await tick(300);
    expect(calls.map((c) => `${c.method} ${c.url}`)).toEqual(["POST /v1/runs"]);

    const s2 = sse();
    const f2 = fake((req, signal) => { s2.abortWith(signal); return s2.response; });
    const run2 = f2.svc.runs.create({ user: "u", prompt: "p" });
    s2.send(1, started); s2.send(2, { kind: "text_delta", turn: 1, text: "a" });
    for await (const e of run2) if (e.kind === "text_delta") break;
    await expect(run2.result()).rejects.toBeInstanceOf(UserAbortError);
    await tick(300);
    expect(f2.calls).toHaveLength(1);
  });

  it("a long tool does not hold the events; its result is not posted after the run ended", async () => {
    const s = sse();
    const { svc, posts } = fake((req) => (req.url === "/v1/runs" ? s.response : ok(req)));
    let release!: () => void;
    const run = svc.runs.create({ user: "u", prompt: "p", tools: [{ name: "slow", run: () => new Promise((r) => (release = () => r("late"))) }] });
    s.send(1, started); s.send(2, call("c1", "slow")); s.send(3, { kind: "text_delta", turn: 1, text: "x" }); s.send(4, completed); s.end();
    expect(await kinds(run)).toEqual(["run_started", "tool_call", "text_delta", "run_completed"]);
    release(); await tick();
    expect(posts("/tool_result")).toHaveLength(0);
  });

  it("refusals: 402 carries the run id; serve_in_app without a handler throws ServeInAppError; a start with no answer is sent again with its key", async () => {
    const f = fake(() => json(402, envelope("allowance_exhausted"), { "service-run-id": "run_9" }));
    const run = f.svc.runs.create({ user: "u", prompt: "p" });
    const err = await run.result().catch((e) => e);
    expect(err).toBeInstanceOf(PaymentRequiredError);
    expect(err.runId).toBe("run_9");
    await expect(run.runId).rejects.toBe(err);
    await expect(kinds(run)).rejects.toBe(err);

    const g = fake(() => json(409, envelope("serve_in_app"), { "service-run-id": "run_8" }));
    const e2 = await g.svc.runs.create({ user: "u", prompt: "p" }).result().catch((e) => e);
    expect(e2).toBeInstanceOf(ServeInAppError);
    expect(e2.runId).toBe("run_8");

    // No answer at all: sent again with the same Idempotency-Key (the service answers a repeat with the same run), then given up.
    const h = fake(() => Promise.reject(new TypeError("fetch failed")), { maxRetries: 2 });
    await expect(h.svc.runs.create({ user: "u", prompt: "p" }).result()).rejects.toBeInstanceOf(ConnectionError);
    expect(h.calls).toHaveLength(3);
    expect(new Set(h.calls.map((c) => c.headers.get("idempotency-key"))).size).toBe(1);
    expect(h.calls[0].headers.get("idempotency-key")).toBeTruthy();
  });

  it("serve_in_app with a handler: usage reported, no events, handed_back", async () => {
    const f = fake((req) => (req.url === "/v1/runs" ? json(409, envelope("serve_in_app"), { "service-run-id": "run_7" }) : json(200, { runId: "run_7", costClass: "app_served", inputTokens: 1, outputTokens: 2, amountMicros: 5 })));
    const run = f.svc.runs.create({ user: "u", prompt: "p", system: "s", model: "m", serveInApp: async (h) => { expect(h).toMatchObject({ runId: "run_7", user: "u", prompt: "p", model: "m", system: "s", tools: [] }); return { output: "o", usage: { inputTokens: 1, outputTokens: 2, costMicros: 5 } }; } });
    expect(await run.runId).toBe("run_7");
    expect(await kinds(run)).toEqual([]);
    expect(await run.result()).toEqual({ runId: "run_7", status: "handed_back", output: "o", usage: { inputTokens: 1, outputTokens: 2 }, route: "app", machineId: null, runtime: null, stopReason: "serve_in_app" });
    expect(f.posts("/usage")[0].body).toEqual({ user: "u", inputTokens: 1, outputTokens: 2, costMicros: 5 });
  });

  it("malformed events throw; missing run id header falls back to run_started; failed/cancelled results", async () => {
    const s = sse();
    const f = fake(() => s.response);
    const run = f.svc.runs.create({ user: "u", prompt: "p" });
    s.send(1, { kind: "text_delta", text: 5 });
    await expect(run.result()).rejects.toBeInstanceOf(MalformedEventError);

    const s2 = sse(null);
    const f2 = fake(() => s2.response);
    const run2 = f2.svc.runs.create({ user: "u", prompt: "p" });
    s2.raw(": keep-alive\n\n"); s2.send(1, started);
    expect(await run2.runId).toBe("run_1");
    s2.send(2, { kind: "text_delta", turn: 1, text: "a" });
    s2.send(3, { kind: "turn_restarted", turn: 1, reason: "lost" });
    s2.send(4, { kind: "text_delta", turn: 1, text: "b" });
    s2.send(5, { kind: "usage", turn: 1, usage });
    s2.send(6, { kind: "run_failed", error: { code: "max_turns", message: "too many" }, stopReason: "max_turns" }); s2.end();
    expect(await run2.result()).toMatchObject({ status: "failed", output: "b", usage: { inputTokens: 7, outputTokens: 3 }, stopReason: "max_turns", error: { code: "max_turns", message: "too many" } });

    const s3 = sse(null);
    const f3 = fake(() => s3.response);
    const run3 = f3.svc.runs.create({ user: "u", prompt: "p" });
    s3.drop();
    const e3 = await run3.result().catch((e) => e);
    expect(e3).toBeInstanceOf(ConnectionError);
    await expect(run3.runId).rejects.toBe(e3);
  });

  it("events(id, {after}) re-attaches; route read from the run; cancel posts reason and user", async () => {
    const s = sse();
    const f = fake((req) => {
      if (req.method === "GET" && req.url.endsWith("/events")) return s.response;
      if (req.method === "GET") return json(200, { id: "run_1", route: "user-subscription", machineId: "m2", runtime: "codex" });
      return json(200, { runId: "run_1", status: "stopping" });
    });
    const run = f.svc.runs.events("run_1", { after: 5, user: "u" });
    expect(await run.cancel("enough")).toEqual({ runId: "run_1", status: "stopping" });
    s.send(5, { kind: "text_delta", turn: 1, text: "old" });
    s.send(6, { kind: "run_cancelled", reason: "enough", output: "partial" }); s.end();
    expect(await run.result()).toMatchObject({ status: "cancelled", output: "partial", route: "user-subscription", machineId: "m2", runtime: "codex", stopReason: "cancelled" });
    expect(f.calls[0].headers.get("last-event-id")).toBe("5");
    expect(f.posts("/cancel")[0].body).toEqual({ reason: "enough", user: "u" });
    expect(await kinds(run)).toEqual(["run_cancelled"]);
    expect(() => run[Symbol.asyncIterator]()).toThrow(/once/);
  });
});
