import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import type WebSocket from "ws";
import { Svc, type RunEvent } from "@svc/sdk";
import { workerMessage, type JobEvent } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { closeRawWorkers, connectRawWorker, type RawWorker } from "../helpers/raw-worker.js";

/**
 * The service's side of an agent run's app tools: the machine (a raw worker
 * speaking the real protocol, standing in for svc-worker's MCP bridge) calls one
 * of the app's tools; the app (the SDK, with the same tool and approval handlers
 * as on a model run) answers; the answer reaches the machine as `tool_result`.
 */
onEachDatabase("app tools on an agent run, on $db.name", (db) => {
  let server: TestServer;
  let svc: Svc;
  const open: WebSocket[] = [];
  let users = 0;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
  }, 60_000);
  afterEach(() => closeRawWorkers(open));
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  const event = (jobId: string, e: JobEvent) => workerMessage("job_event", { jobId, event: e });

  /** A fresh user whose machine serves `claude-code` (the raw worker). */
  async function machine(): Promise<{ user: string; w: RawWorker }> {
    const user = `coder-${++users}`;
    const m = await pairViaApi(server, server.dev, user);
    const w = await connectRawWorker(server.url, m.token, open);
    w.send(workerMessage("hello", { client: "bridge-double", version: "0", runtimes: [{ name: "claude-code", kind: "agent", costClass: "user_subscription", models: [] }] }));
    await w.next("welcome");
    return { user, w };
  }

  async function collect(run: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of run) events.push(e);
    return events;
  }

  it("the job carries the tools; a call becomes the SDK's tool call and its result goes back to the machine; an unknown tool is answered as an error without asking", async () => {
    const { user, w } = await machine();
    const seen: unknown[] = [];
    const run = svc.runs.create({
      user,
      prompt: "Look up order 42",
      system: "Be brief.",
      model: "claude-code",
      tools: [{ name: "lookup_order", description: "Finds an order.", parameters: { type: "object", properties: { id: { type: "string" } } }, run: (args) => (seen.push(args), { status: "shipped" }) }],
    });
    const events = collect(run);
    const { payload } = await w.next("job");
    expect(payload.job).toMatchObject({ kind: "agent_run", system: "Be brief.", tools: [{ name: "lookup_order", description: "Finds an order.", parameters: { type: "object", properties: { id: { type: "string" } } } }] });

    w.send(event(payload.jobId, { type: "tool_call", id: "mcp_unknown", name: "rm_rf", arguments: "{}" }));
    const refused = await w.next("tool_result");
    expect(refused.payload).toEqual({ jobId: payload.jobId, callId: "mcp_unknown", output: "There is no tool named rm_rf on this run.", isError: true });

    w.send(event(payload.jobId, { type: "tool_call", id: "mcp_1", name: "lookup_order", arguments: '{"id":"42"}' }));
    const answered = await w.next("tool_result");
    expect(answered.payload).toEqual({ jobId: payload.jobId, callId: "mcp_1", output: '{"status":"shipped"}', isError: false });
    expect(seen).toEqual([{ id: "42" }]);

    w.send(event(payload.jobId, { type: "text_delta", text: "Order 42 shipped." }));
    w.send(event(payload.jobId, { type: "done", finishReason: "end_turn", output: "Order 42 shipped.", usage: { inputTokens: 10, outputTokens: 5 } }));
    const all = await events;
    const calls = all.filter((e) => e.kind === "tool_call");
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: "lookup_order", arguments: { id: "42" } });
    expect((calls[0] as { callId: string }).callId).toMatch(/^call_/);
    expect(all.at(-1)).toMatchObject({ kind: "run_completed", output: "Order 42 shipped." });
  });

  it("a tool marked needsApproval asks first: denied, the machine gets an error result and the app never sees a tool call", async () => {
    const { user, w } = await machine();
    let ran = false;
    const asked: string[] = [];
    const run = svc.runs.create({
      user,
      prompt: "Refund it",
      model: "claude-code",
      tools: [{ name: "refund", needsApproval: true, run: () => ((ran = true), "refunded") }],
      onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), { decision: "deny", reason: "not today" }),
    });
    const events = collect(run);
    const { payload } = await w.next("job");
    w.send(event(payload.jobId, { type: "tool_call", id: "mcp_r", name: "refund", arguments: "{}" }));
    const answer = await w.next("tool_result");
    expect(answer.payload).toEqual({ jobId: payload.jobId, callId: "mcp_r", output: "The user denied this call: not today", isError: true });
    w.send(event(payload.jobId, { type: "done", finishReason: "end_turn", output: "No refund.", usage: { inputTokens: 1, outputTokens: 1 } }));
    const all = await events;
    expect(asked).toEqual(["tool:refund"]);
    expect(ran).toBe(false);
    expect(all.some((e) => e.kind === "tool_call")).toBe(false);
    expect(all.find((e) => e.kind === "approval_request")).toMatchObject({ what: "tool", tool: "refund" });
  });

  it("allowed, the call goes to the app; a tool that throws answers the machine with isError", async () => {
    const { user, w } = await machine();
    const run = svc.runs.create({
      user,
      prompt: "Charge it",
      model: "claude-code",
      tools: [{ name: "charge", needsApproval: true, run: () => { throw new Error("card declined"); } }],
      onApproval: () => true,
    });
    const events = collect(run);
    const { payload } = await w.next("job");
    w.send(event(payload.jobId, { type: "tool_call", id: "mcp_c", name: "charge", arguments: '{"amount":5}' }));
    const answer = await w.next("tool_result");
    expect(answer.payload).toMatchObject({ jobId: payload.jobId, callId: "mcp_c", isError: true });
    expect(answer.payload.output).toContain("card declined");
    w.send(event(payload.jobId, { type: "done", finishReason: "end_turn", output: "Declined.", usage: { inputTokens: 1, outputTokens: 1 } }));
    const all = await events;
    expect(all.map((e) => e.kind)).toEqual(expect.arrayContaining(["approval_request", "tool_call", "run_completed"]));
  });

  it("no result by the deadline fails the run with tool_result_timeout and stops the machine's job", async () => {
    const { user, w } = await machine();
    const res = await server.fetch("/v1/runs", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
      body: JSON.stringify({ user, prompt: "wait", model: "claude-code", tools: [{ name: "slow" }], limits: { toolResultTimeoutMs: 1000 } }),
    });
    expect(res.status).toBe(200);
    const { payload } = await w.next("job");
    w.send(event(payload.jobId, { type: "tool_call", id: "mcp_s", name: "slow", arguments: "{}" }));
    const cancel = await w.next("cancel", 15_000);
    expect(cancel.payload.jobId).toBe(payload.jobId);
    const text = await res.text();
    expect(text).toContain("event: run_failed");
    expect(text).toContain('"stopReason":"tool_result_timeout"');
  });

  it("a permission request the agent withdraws is no longer relayed, and the app is told", async () => {
    const { user, w } = await machine();
    let answer: (v: boolean) => void = () => {};
    const run = svc.runs.create({ user, prompt: "edit", model: "claude-code", onApproval: () => new Promise<boolean>((r) => (answer = r)) });
    const events = collect(run);
    const { payload } = await w.next("job");
    w.send(event(payload.jobId, { type: "permission_request", requestId: "req_1", tool: "Bash", input: { command: "ls" } }));
    await new Promise((r) => setTimeout(r, 300));
    w.send(event(payload.jobId, { type: "permission_withdrawn", requestId: "req_1" }));
    await new Promise((r) => setTimeout(r, 300));
    answer(true);
    await new Promise((r) => setTimeout(r, 1500));
    expect(w.received.some((m) => m.type === "permission_response")).toBe(false);
    w.send(event(payload.jobId, { type: "done", finishReason: "end_turn", output: "ok", usage: { inputTokens: 1, outputTokens: 1 } }));
    const all = await events;
    expect(all.find((e) => e.kind === "activity")).toMatchObject({ summary: expect.stringContaining("withdrew its permission request") });
  });

  it("prompt-cache tokens are recorded apart from input, in the events and the ledger row, and a tokens plan counts them", async () => {
    const { user, w } = await machine();
    const app = { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" };
    const slug = `cache-${db.name}-${users}`;
    expect((await server.fetch("/v1/plans", { method: "POST", headers: app, body: JSON.stringify({ slug, name: "Cache", allowance: { unit: "tokens", limit: 1000 } }) })).status).toBe(201);
    expect((await server.fetch(`/v1/users/${user}/plan`, { method: "PUT", headers: app, body: JSON.stringify({ plan: slug }) })).status).toBe(200);

    const run = svc.runs.create({ user, prompt: "use the cache", model: "claude-code" });
    const events = collect(run);
    const { payload } = await w.next("job");
    w.send(event(payload.jobId, { type: "done", finishReason: "end_turn", output: "ok", usage: { inputTokens: 10, outputTokens: 20, cacheReadTokens: 900, cacheWriteTokens: 100 } }));
    const all = await events;
    expect(all.find((e) => e.kind === "usage")).toMatchObject({ usage: { inputTokens: 10, outputTokens: 20, cacheReadTokens: 900, cacheWriteTokens: 100, costClass: "user_subscription" } });
    expect(all.at(-1)).toMatchObject({ kind: "run_completed", usage: { inputTokens: 10, outputTokens: 20, cacheReadTokens: 900, cacheWriteTokens: 100 } });

    const rows = (await (await server.fetch(`/v1/usage?user=${user}`, { headers: app })).json()) as { data: { kind: string; inputTokens: number; cacheReadTokens: number; cacheWriteTokens: number; outputTokens: number }[] };
    expect(rows.data.find((r) => r.kind === "tokens")).toMatchObject({ inputTokens: 10, outputTokens: 20, cacheReadTokens: 900, cacheWriteTokens: 100 });

    // 10 + 900 + 100 + 20 = 1,030 tokens: past the plan's 1,000, though input and output alone are 30.
    const read = (await (await server.fetch(`/v1/users/${user}`, { headers: app })).json()) as { usage: { cacheReadTokens: number; cacheWriteTokens: number }; allowance: { used: number; reached: boolean } };
    expect(read.usage).toMatchObject({ cacheReadTokens: 900, cacheWriteTokens: 100 });
    expect(read.allowance).toMatchObject({ used: 1030, reached: true });
    const refused = await server.fetch("/v1/runs", { method: "POST", headers: app, body: JSON.stringify({ user, prompt: "again", model: "claude-code" }) });
    expect(refused.status).toBe(402);
  });
});
