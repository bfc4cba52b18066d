import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { expectError } from "../helpers/requests.js";
import { sseFrames, type SseFrame } from "../helpers/sse.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { pollUntil } from "../helpers/process.js";

/**
 * Conversations on a model runtime and on `svc/echo`: a follow-up run (`previousRunId`) carries the stored
 * conversation (tool call and result included) to whichever runtime routing picks; a message sent while a run
 * works (`POST /v1/runs/:id/messages`) goes in before its next model call, recorded as `user_message`; the
 * refusals (another user's run, an active one, a handed-back one, an ended run's message) say what is true.
 */
onEachDatabase("conversations on $db.name", (db) => {
  let server: TestServer;
  let ollama: ModelStandIn;
  let llamacpp: ModelStandIn;
  let worker: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    ollama = await startModelStandIn(["llama3.2:3b"]);
    llamacpp = await startModelStandIn(["qwen2.5:7b"]);
    const m = await pairViaApi(server, server.dev, "conv-alice", { runtimes: { ollama: ollama.url, llamacpp: llamacpp.url, lmstudio: false, claude: false, codex: false } });
    worker = spawnWorker(["start"], m.home);
    await worker.waitFor(/Connected/);
    const headers = { authorization: `Bearer ${server.dev.appKey}` };
    await pollUntil(
      async () => ((await (await server.fetch(`/v1/models?user=conv-alice`, { headers })).json()) as { data: { owned_by: string }[] }).data.map((x) => x.owned_by),
      (owners) => owners.includes("ollama") && owners.includes("llamacpp"),
      20_000,
      "both runtimes advertised",
    );
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await ollama?.close();
    await llamacpp?.close();
    removeTempDirs();
  });

  const headers = (extra: Record<string, string> = {}) => ({ authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json", ...extra });
  const post = (path: string, body: unknown, extra: Record<string, string> = {}) => server.fetch(path, { method: "POST", headers: headers(extra), body: JSON.stringify(body) });
  /** Starts a run and reads its events as they come; `done` resolves with all of them once it ends. */
  async function start(body: Record<string, unknown>): Promise<{ runId: string; frames: SseFrame[]; done: Promise<SseFrame[]> }> {
    const res = await post("/v1/runs", body);
    if (res.status !== 200) throw new Error(`POST /v1/runs answered ${res.status}: ${await res.text()}`);
    const runId = res.headers.get("service-run-id")!;
    const frames: SseFrame[] = [];
    const done = (async () => {
      for await (const f of sseFrames(res)) frames.push(f);
      return frames;
    })();
    return { runId, frames, done };
  }
  const answerTools = async (runId: string, frames: SseFrame[], done: Promise<SseFrame[]>) => {
    const answered = new Set<string>();
    let finished = false;
    void done.then(() => (finished = true));
    while (!finished) {
      for (const f of frames.filter((x) => x.event === "tool_call" && !answered.has(String(x.data.callId)))) {
        answered.add(String(f.data.callId));
        expect((await post(`/v1/runs/${runId}/tool_result`, { callId: f.data.callId, result: { temp: 21 } })).status).toBe(200);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    return done;
  };

  describe("on model runtimes", () => {
    it("a follow-up carries the stored conversation (the tool call and its result) to another runtime; each run its own ledger rows", async () => {
      const first = await start({ user: "conv-alice", model: "ollama/llama3.2:3b", system: "Be brief.", prompt: "What is the weather in Paris?", tools: [{ name: "weather", parameters: { type: "object" } }] });
      const firstFrames = await answerTools(first.runId, first.frames, first.done);
      expect(firstFrames.at(-1)).toMatchObject({ event: "run_completed" });
      expect(firstFrames.at(-1)!.data.output).toContain("The tool said");

      const before = llamacpp.requests.length;
      const follow = await start({ user: "conv-alice", model: "llamacpp/qwen2.5:7b", prompt: "And tomorrow?", previousRunId: first.runId });
      const frames = await follow.done;
      expect(frames[0]).toMatchObject({ event: "run_started", data: { previousRunId: first.runId, runtime: "llamacpp" } });
      expect(frames[0].data.session).toBeUndefined();
      expect(frames.at(-1)).toMatchObject({ event: "run_completed" });
      // The other runtime got the whole conversation: the first run's system prompt kept (not given again), its prompt, the tool call, its result, its answer, then the new prompt.
      const sent = llamacpp.requests.slice(before)[0] as { messages: { role: string; content?: unknown; tool_calls?: { function: { name: string } }[] }[] };
      expect(sent.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant", "user"]);
      expect(sent.messages[0].content).toBe("Be brief.");
      expect(sent.messages[1].content).toBe("What is the weather in Paris?");
      expect(sent.messages[2].tool_calls?.[0].function.name).toBe("weather");
      expect(String(sent.messages[3].content)).toContain("21");
      expect(sent.messages[5].content).toBe("And tomorrow?");
      // Tools omitted: the previous run's are kept (offered again).
      expect((sent as { tools?: unknown[] }).tools).toHaveLength(1);
      const read = await (await server.fetch(`/v1/runs/${follow.runId}`, { headers: headers() })).json();
      expect(read).toMatchObject({ previousRunId: first.runId, status: "completed", runtime: "llamacpp" });
      // Metering unchanged in kind: each run its own rows.
      const rows = await server.db.prisma.usageRow.findMany({ where: { runId: { in: [first.runId, follow.runId] } } });
      expect(new Set(rows.map((r) => r.runId))).toEqual(new Set([first.runId, follow.runId]));
    }, 60_000);

    it("a message sent while the model answers goes in before the next model call; the run goes on with it; user_message in order, ids without a gap", async () => {
      const before = ollama.requests.length;
      const run = await start({ user: "conv-alice", model: "ollama/llama3.2:3b", prompt: "Tell me a long story [slow]" });
      await pollUntil(async () => run.frames.some((f) => f.event === "text_delta"), (ok) => ok, 20_000, "the model streaming");
      const res = await post(`/v1/runs/${run.runId}/messages`, { content: "Use the staging database, not prod.", user: "conv-alice" });
      expect(res.status).toBe(202);
      const sent = (await res.json()) as { messageId: string; delivery: string };
      expect(sent.delivery).toBe("next_turn");
      const frames = await run.done;
      const kinds = frames.map((f) => f.event);
      const at = kinds.indexOf("user_message");
      expect(at).toBeGreaterThan(kinds.indexOf("text_delta"));
      expect(frames[at].data).toMatchObject({ messageId: sent.messageId, content: "Use the staging database, not prod.", delivery: "next_turn" });
      expect(kinds.at(-1)).toBe("run_completed");
      expect(frames.map((f) => Number(f.id))).toEqual(frames.map((_, i) => i + 1));
      // The model's next call (the same run) carries the message after the turn it came during.
      const calls = ollama.requests.slice(before) as { messages: { role: string; content?: unknown }[] }[];
      expect(calls).toHaveLength(2);
      expect(calls[1].messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
      expect(calls[1].messages[2].content).toBe("Use the staging database, not prod.");
      // An ended run takes no message: 409, nothing kept.
      await expectError(await post(`/v1/runs/${run.runId}/messages`, { content: "too late" }), 409, "run_finished");
      expect(await server.db.prisma.runUserMessage.count({ where: { runId: run.runId } })).toBe(1);
    }, 60_000);
  });

  describe("on svc/echo", () => {
    it("a follow-up remembers the previous answer ({{previous}}); a message mid-run is answered; the same Idempotency-Key twice delivers one message", async () => {
      const first = await start({ user: "conv-bob", model: "svc/echo", prompt: JSON.stringify([{ say: "Working on it." }, { wait: 1500 }, { say: " Done." }]) });
      await pollUntil(async () => first.frames.some((f) => f.event === "text_delta"), (ok) => ok, 10_000, "the first words");
      const key = { "idempotency-key": `steer-${first.runId}` };
      const a = await post(`/v1/runs/${first.runId}/messages`, { content: "Call it tidy." }, key);
      const b = await post(`/v1/runs/${first.runId}/messages`, { content: "Call it tidy." }, key);
      expect([a.status, b.status]).toEqual([202, 202]);
      expect((await b.json()).messageId).toBe((await a.json()).messageId);
      const frames = await first.done;
      expect(frames.filter((f) => f.event === "user_message")).toHaveLength(1);
      // The turn in flight ended; the message then went in and the model answered it.
      expect(frames.at(-1)).toMatchObject({ event: "run_completed", data: { output: "Call it tidy." } });

      const follow = await start({ user: "conv-bob", model: "svc/echo", prompt: JSON.stringify([{ say: "Before, I said: {{previous}}" }]), previousRunId: first.runId });
      const out = await follow.done;
      expect(out[0]).toMatchObject({ event: "run_started", data: { previousRunId: first.runId } });
      expect(out.at(-1)).toMatchObject({ event: "run_completed", data: { output: "Before, I said: Call it tidy." } });
      // A third turn, continuing the second (the chain: the whole conversation is the second's stored one plus this).
      const third = await start({ user: "conv-bob", prompt: JSON.stringify([{ say: "And before that: {{previous}}" }]), previousRunId: follow.runId });
      expect((await third.done).at(-1)).toMatchObject({ event: "run_completed", data: { output: "And before that: Before, I said: Call it tidy." } });
    }, 30_000);

    it("refusals: another user's run is the same 404 as an unknown one; an active run 409 run_active; a handed-back run 409 conversation_unavailable; nothing started", async () => {
      const theirs = await start({ user: "conv-carol", model: "svc/echo", prompt: "mine" });
      await theirs.done;
      const runsBefore = await server.db.prisma.run.count();
      const other = await post("/v1/runs", { user: "conv-bob", model: "svc/echo", prompt: "again", previousRunId: theirs.runId });
      const unknown = await post("/v1/runs", { user: "conv-bob", model: "svc/echo", prompt: "again", previousRunId: "run_nosuchrunnosuchrunnosu" });
      const a = await expectError(other, 404, "not_found");
      const b = await expectError(unknown, 404, "not_found");
      expect(a.error.message.replace(theirs.runId, "X")).toBe(b.error.message.replace("run_nosuchrunnosuchrunnosu", "X"));

      const active = await start({ user: "conv-bob", model: "svc/echo", prompt: JSON.stringify([{ wait: 3000 }, { say: "late" }]) });
      const busy = await expectError(await post("/v1/runs", { user: "conv-bob", model: "svc/echo", prompt: "again", previousRunId: active.runId }), 409, "run_active");
      expect(busy.error.message).toMatch(/still (running|queued)/);

      const handed = await post("/v1/runs", { user: "conv-bob", prompt: "serve it yourself", route: { prefer: ["app"] } });
      expect(handed.status).toBe(409);
      const handedId = handed.headers.get("service-run-id")!;
      await expectError(await post("/v1/runs", { user: "conv-bob", model: "svc/echo", prompt: "again", previousRunId: handedId }), 409, "conversation_unavailable");
      // Refused follow-ups started nothing (the handback itself is the one run added, and the active one).
      expect(await server.db.prisma.run.count()).toBe(runsBefore + 2);
      await active.done;
    }, 30_000);
  });
});
