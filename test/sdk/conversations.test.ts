import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError, Svc, type RunEvent, type RunStream } from "@svc/sdk";
import { startTestServer, type TestServer } from "../helpers/server.js";

/**
 * The SDK's conversations against the real server, on `svc/echo`: `run.followUp(prompt)`
 * (only once the run has ended; same user, model and tools), `run.send(text)` (steering:
 * a `user_message` event; once per idempotency key; `409 run_finished` after the end).
 */

const script = (...steps: unknown[]) => JSON.stringify(steps);

async function collect(stream: RunStream): Promise<RunEvent[]> {
  const events: RunEvent[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

describe("conversations from the SDK", () => {
  let server: TestServer;
  let svc: Svc;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
  }, 60_000);
  afterAll(() => server?.close());

  describe("what works", () => {
    it("followUp continues an ended run: same user, model and tools (answered by the run's own tool), previousRunId set", async () => {
      const calls: unknown[] = [];
      const first = svc.runs.create({
        user: "conv-alice",
        model: "svc/echo",
        prompt: script({ say: "My name is Echo." }),
        tools: [{ name: "lookup", run: async (args) => (calls.push(args), "found it") }],
      });
      expect((await first.result()).output).toBe("My name is Echo.");

      // No model, no tools given: the previous run's are kept (svc/echo, `lookup`), and the SDK answers `lookup` as before.
      const second = first.followUp(script({ say: "Before: {{previous}} " }, { call: "lookup", arguments: { q: "x" } }, { say: "Then: {{result}}" }));
      const events = await collect(second);
      const result = await second.result();
      expect(result).toMatchObject({ status: "completed", output: "Then: found it", route: "service" });
      expect(calls).toEqual([{ q: "x" }]);
      const started = events.find((e) => e.kind === "run_started");
      expect(started).toMatchObject({ kind: "run_started", model: "svc/echo", previousRunId: await first.runId });
      const text = events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join("");
      expect(text).toContain("Before: My name is Echo.");

      const stored = await svc.runs.get(result.runId);
      expect(stored).toMatchObject({ user: "conv-alice", model: "svc/echo", previousRunId: await first.runId });
      expect((await svc.runs.get(await first.runId)).previousRunId).toBeNull();

      // And a follow-up of the follow-up, with options of its own.
      const third = second.followUp("plain words", { metadata: { turn: "3" } });
      expect(await third.result()).toMatchObject({ status: "completed", output: "plain words" });
      expect((await svc.runs.get(await third.runId)).previousRunId).toBe(result.runId);
    });

    it("send steers a working run: 202 with its message id and delivery, a user_message event where it was delivered, answered by the run", async () => {
      const run = svc.runs.create({ user: "conv-alice", model: "svc/echo", prompt: script({ say: "Working. " }, { wait: 1500 }, { say: "Done." }) });
      const events: RunEvent[] = [];
      let sent: Awaited<ReturnType<RunStream["send"]>> | null = null;
      for await (const e of run) {
        events.push(e);
        if (e.kind === "text_delta" && !sent) sent = await run.send("and the docs too");
      }
      const result = await run.result();
      expect(sent).toMatchObject({ runId: result.runId, messageId: expect.any(String), delivery: "next_turn" });
      const delivered = events.filter((e) => e.kind === "user_message");
      expect(delivered).toEqual([{ kind: "user_message", messageId: sent!.messageId, content: "and the docs too", delivery: "next_turn" }]);
      // The script had nothing left: the run's last turn answers the message.
      expect(result).toMatchObject({ status: "completed", output: "and the docs too" });
    });

    it("send twice with the same idempotency key delivers one message", async () => {
      const run = svc.runs.create({ user: "conv-alice", model: "svc/echo", prompt: script({ wait: 1500 }, { say: "{{messages}}" }, { say: "." }) });
      const runId = await run.runId;
      const a = await run.send("once only", { idempotencyKey: "conv-steer-1" });
      const b = await run.send("once only", { idempotencyKey: "conv-steer-1" });
      expect(b).toEqual(a);
      // Through svc.runs.send too, with the run's user: still the same message.
      expect(await svc.runs.send(runId, { content: "once only", user: "conv-alice" }, { idempotencyKey: "conv-steer-1" })).toEqual(a);
      await run.result();
      const events = await collect(svc.runs.events(runId));
      const messages = events.filter((e) => e.kind === "user_message");
      expect(messages).toHaveLength(1);
      expect(messages[0]).toMatchObject({ messageId: a.messageId, content: "once only" });
    });
  });

  describe("what is refused", () => {
    it("followUp before the run's end throws a clear error, and starts nothing", async () => {
      const run = svc.runs.create({ user: "conv-bob", model: "svc/echo", prompt: script({ wait: 1000 }, { say: "late" }) });
      expect(() => run.followUp("too soon")).toThrow(/has not ended: a follow-up continues an ended run.*run\.result\(\).*run\.send/);
      await run.runId;
      expect(() => run.followUp("still too soon")).toThrow(/has not ended/);
      await run.result();
      const runs = await server.db.prisma.run.count({ where: { endUser: { externalId: "conv-bob" } } });
      expect(runs).toBe(1);
      expect(await run.followUp("now").result()).toMatchObject({ status: "completed", output: "now" });
    });

    it("send after the run's end: ConflictError with code run_finished", async () => {
      const run = svc.runs.create({ user: "conv-bob", model: "svc/echo", prompt: "quick" });
      await run.result();
      const err = await run.send("too late").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConflictError);
      expect(err).toMatchObject({ status: 409, code: "run_finished" });
      expect((err as ConflictError).message).toMatch(/ended/);
    });

    it("a follow-up of a run still working is 409 run_active, of another user's run 404", async () => {
      const run = svc.runs.create({ user: "conv-bob", model: "svc/echo", prompt: script({ wait: 1500 }, { say: "x" }) });
      const runId = await run.runId;
      const active = await svc.runs.create({ user: "conv-bob", prompt: "next", previousRunId: runId }).result().catch((e: unknown) => e);
      expect(active).toBeInstanceOf(ConflictError);
      expect(active).toMatchObject({ status: 409, code: "run_active" });
      await run.result();
      const other = await svc.runs.create({ user: "conv-carol", prompt: "next", previousRunId: runId }).result().catch((e: unknown) => e);
      expect(other).toMatchObject({ status: 404, code: "not_found" });
    });
  });
});
