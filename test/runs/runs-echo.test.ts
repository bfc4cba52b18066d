import { afterAll, beforeAll, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { expectError } from "../helpers/requests.js";
import { sseFrames, type SseFrame } from "../helpers/sse.js";

/**
 * Runs on `svc/echo`, the service's own model: no paired machine, cost class
 * `free`, a script in the prompt making it call the app's tools and ask its
 * approvals, driven by the SDK's run loop; through the same engine as any run
 * (events, answers, cancel, deadlines, ledger rows).
 */
onEachDatabase("runs on svc/echo on $db.name", (db) => {
  let server: TestServer;
  let svc: Svc;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  const post = (path: string, body: unknown) =>
    server.fetch(path, { method: "POST", headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  const usageRows = (runId: string) => server.db.prisma.usageRow.findMany({ where: { runId }, orderBy: { id: "asc" } });
  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }

  it("without a script, echoes the prompt and calls no tool; route service, cost class free, one echo row and one tokens row", async () => {
    const run = svc.runs.create({ user: "echo-alice", model: "svc/echo", prompt: "hello there, world", tools: [{ name: "never", run: () => { throw new Error("not called"); } }] });
    const events = await collect(run);
    const result = await run.result();
    expect(result).toMatchObject({ status: "completed", output: "hello there, world", route: "service", machineId: null, runtime: "svc", stopReason: "end_turn" });
    expect(events.map((e) => e.kind)).not.toContain("tool_call");
    expect(events[0]).toMatchObject({ kind: "run_started", route: "service", costClass: "free", model: "svc/echo" });
    // Tokens are counted as on chat completions' svc/echo: words.
    expect(result.usage).toEqual({ inputTokens: 3, outputTokens: 3 });
    const rows = await usageRows(result.runId);
    expect(rows.map((r) => [r.kind, r.costClass, Number(r.amountMicros), Number(r.inputTokens), Number(r.outputTokens)])).toEqual([
      ["echo", "free", 0, 0, 0],
      ["tokens", "free", 0, 3, 3],
    ]);
    const read = await svc.runs.get(result.runId);
    expect(read).toMatchObject({ status: "completed", route: "service", costClass: "free", machineId: null, output: "hello there, world" });
  });

  it("a script calls the app's tool; the next step runs after the result; the answer includes it; a row per turn, exactly once", async () => {
    const seen: unknown[] = [];
    const run = svc.runs.create({
      user: "echo-alice",
      model: "svc/echo",
      prompt: JSON.stringify([{ say: "Looking it up." }, { call: "weather", arguments: { city: "Paris" } }, { say: "It is {{result}}." }]),
      tools: [{ name: "weather", parameters: { type: "object" }, run: async (args) => (seen.push(args), { temp: 21 }) }],
    });
    const events = await collect(run);
    const result = await run.result();
    expect(seen).toEqual([{ city: "Paris" }]);
    expect(result).toMatchObject({ status: "completed", output: 'It is {"temp":21}.', stopReason: "end_turn" });
    expect(events.map((e) => e.kind)).toEqual(["run_started", "text_delta", "usage", "tool_call", "text_delta", "usage", "run_completed"]);
    expect(events.filter((e) => e.kind === "tool_call")).toHaveLength(1);
    expect(events.filter((e) => e.kind === "usage")).toHaveLength(2);
    const rows = await usageRows(result.runId);
    expect(rows.map((r) => [r.kind, r.costClass, r.uniqueKey])).toEqual([
      ["echo", "free", `run:${result.runId}`],
      ["tokens", "free", `tokens:${result.runId}:1`],
      ["tokens", "free", `tokens:${result.runId}:2`],
    ]);
    expect(rows.every((r) => Number(r.amountMicros) === 0)).toBe(true);
    const sum = rows.reduce((a, r) => [a[0] + Number(r.inputTokens), a[1] + Number(r.outputTokens)], [0, 0]);
    expect({ inputTokens: sum[0], outputTokens: sum[1] }).toEqual(result.usage);
  });

  it("a call of a tool that needs approval goes through the approval flow: approved, it runs; denied, the script gets the denial", async () => {
    const script = JSON.stringify({ script: [{ call: "send_mail", arguments: { to: "bob" } }, { say: "Mail: {{result}}" }] });
    const sent: unknown[] = [];
    const tools = [{ name: "send_mail", needsApproval: true, run: (args: unknown) => (sent.push(args), "sent") }];
    const approved = svc.runs.create({ user: "echo-alice", model: "svc/echo", prompt: script, tools, onApproval: (req) => req.tool === "send_mail" });
    const approvedEvents = await collect(approved);
    expect(approvedEvents.map((e) => e.kind)).toContain("approval_request");
    expect(await approved.result()).toMatchObject({ status: "completed", output: "Mail: sent" });
    expect(sent).toEqual([{ to: "bob" }]);

    const denied = svc.runs.create({ user: "echo-alice", model: "svc/echo", prompt: script, tools, onApproval: () => ({ decision: "deny", reason: "not today" }) });
    const deniedEvents = await collect(denied);
    expect(deniedEvents.map((e) => e.kind)).toContain("approval_request");
    expect(deniedEvents.map((e) => e.kind)).not.toContain("tool_call");
    expect(await denied.result()).toMatchObject({ status: "completed", output: "Mail: Error: the user denied this call: not today" });
    expect(sent).toHaveLength(1);
  });

  it("a bad script is a 400 in the envelope at the start, naming the prompt; no run, no user, no ledger row", async () => {
    const before = { runs: await server.db.prisma.run.count(), rows: await server.db.prisma.usageRow.count() };
    const cases: [unknown, RegExp][] = [
      ["[{\"say\": ", /not JSON/],
      [JSON.stringify({ steps: [] }), /not a svc\/echo script/],
      [JSON.stringify([{ tool: "x" }]), /Step 1 .* has the keys "tool"/],
      [JSON.stringify([{ say: "a" }, { call: "missing" }]), /Step 2 .* calls the tool "missing", which the run does not offer \(its tools: weather\)/],
      [JSON.stringify([{ wait: -1 }]), /"wait" must be/],
    ];
    for (const [prompt, message] of cases) {
      const res = await post("/v1/runs", { user: "echo-nobody", model: "svc/echo", prompt, tools: [{ name: "weather" }] });
      expect(res.headers.get("service-run-id")).toBeNull();
      const body = await expectError(res, 400, "invalid_request");
      expect(body.error.message).toMatch(message);
      expect(body.error.param).toBe("prompt");
    }
    expect({ runs: await server.db.prisma.run.count(), rows: await server.db.prisma.usageRow.count() }).toEqual(before);
    expect(await server.db.prisma.endUser.count({ where: { externalId: "echo-nobody" } })).toBe(0);
  });

  it("cancel mid-run (during a wait step) ends the run cancelled with what was said; a fail step fails it; the turn deadline applies", async () => {
    const run = svc.runs.create({ user: "echo-alice", model: "svc/echo", prompt: JSON.stringify([{ say: "working" }, { wait: 60_000 }, { say: " never" }]) });
    const kinds: string[] = [];
    for await (const e of run) {
      kinds.push(e.kind);
      if (e.kind === "text_delta") await run.cancel("changed my mind");
    }
    const cancelled = await run.result();
    expect(cancelled).toMatchObject({ status: "cancelled", stopReason: "cancelled" });
    expect(kinds.at(-1)).toBe("run_cancelled");
    expect((await svc.runs.get(cancelled.runId)).output).toBe("working");
    // The ledger: the run's row only (the cancelled turn reported no usage).
    expect((await usageRows(cancelled.runId)).map((r) => r.kind)).toEqual(["echo"]);

    const failed = svc.runs.create({ user: "echo-alice", model: "svc/echo", prompt: JSON.stringify([{ say: "trying" }, { fail: "the tool server is down" }]) });
    await collect(failed);
    expect(await failed.result()).toMatchObject({ status: "failed", stopReason: "runtime_error", error: { code: "script_failed", message: "the tool server is down" } });

    const slow = svc.runs.create({ user: "echo-alice", model: "svc/echo", prompt: JSON.stringify([{ wait: 5_000 }]), limits: { turnTimeoutMs: 1000 } });
    await collect(slow);
    expect(await slow.result()).toMatchObject({ status: "failed", stopReason: "turn_timeout" });
  });

  it("raw HTTP: Service-Run-Id, the tool_call frame answered with tool_result, whatever route.prefer asks; listed in GET /v1/models", async () => {
    const res = await post("/v1/runs", { user: "echo-bob", model: "svc/echo", route: { prefer: ["app"] }, prompt: JSON.stringify([{ call: "lookup", arguments: { q: 1 } }]), tools: [{ name: "lookup" }] });
    expect(res.status).toBe(200);
    const runId = res.headers.get("service-run-id")!;
    expect(runId).toMatch(/^run_/);
    const frames: SseFrame[] = [];
    for await (const f of sseFrames(res)) {
      frames.push(f);
      if (f.event === "tool_call") {
        const answer = await post(`/v1/runs/${runId}/tool_result`, { callId: f.data.callId, result: { found: true } });
        expect(answer.status).toBe(200);
      }
    }
    expect(frames.map((f) => f.event)).toEqual(["run_started", "usage", "tool_call", "text_delta", "usage", "run_completed"]);
    expect(frames.at(-1)!.data).toMatchObject({ kind: "run_completed", output: '{"found":true}' });
    const models = await (await server.fetch("/v1/models", { headers: { authorization: `Bearer ${server.dev.appKey}` } })).json();
    expect(models.data.map((m: { id: string }) => m.id)).toContain("svc/echo");
  });
});
