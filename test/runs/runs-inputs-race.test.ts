import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { removeTempDirs } from "../helpers/process.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { sseFrames } from "../helpers/sse.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { startModelMachine, type WorkerProcess } from "../helpers/worker.js";

/**
 * A driver reads its inputs (answers, a cancel) while a model turn runs, and
 * announces the turn's tool calls when it ends. With drivers looking every 5 ms
 * (`RUN_POLL_MS`), each read answered 15 ms late and each turn 30 ms long, a read
 * is in flight as a turn ends: what it
 * brings back predates the calls just written, and must not make the driver
 * think a call was never announced (it announced it again: two `tool_call`
 * events with one call id, the second answer refused `already_answered`).
 */
onEachDatabase("a run's inputs read while its turn ends, on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let worker: WorkerProcess;
  const tools = ["weather", "clock", "news"].map((name) => ({ name }));

  beforeAll(async () => {
    server = await startTestServerOn(db, { RUN_POLL_MS: "5" }, { runningClock: true });
    // Each read of a driver's inputs answers 15 ms late (a slow database): one is in flight whenever a turn ends.
    const store = server.services.runStore;
    const read = store.inputs.bind(store);
    store.inputs = async (runId: string) => {
      const inputs = await read(runId);
      await new Promise((r) => setTimeout(r, 15));
      return inputs;
    };
    model = await startModelStandIn();
    worker = await startModelMachine(server, server.dev, "rita", model.url);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  it("30 runs of 3 tool calls each: every call announced once, every answer taken, every run completed", { timeout: 120_000 }, async () => {
    const headers = { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" };
    for (let i = 0; i < 30; i++) {
      const res = await server.fetch("/v1/runs", { method: "POST", headers, body: JSON.stringify({ user: "rita", prompt: `three tools [late] #${i}`, model: "ollama/llama3.2:3b", route: { prefer: ["user-hardware"] }, tools }) });
      expect(res.status).toBe(200);
      const runId = res.headers.get("service-run-id")!;
      const calls: string[] = [];
      const answers: Promise<number>[] = [];
      let last = "";
      for await (const f of sseFrames(res)) {
        last = String(f.event);
        if (f.event !== "tool_call") continue;
        const callId = String(f.data.callId);
        calls.push(callId);
        answers.push(server.fetch(`/v1/runs/${runId}/tool_result`, { method: "POST", headers, body: JSON.stringify({ callId, result: { ok: i } }) }).then((r) => r.status));
      }
      expect(new Set(calls).size, `${runId}: ${calls.join(" ")}`).toBe(3);
      expect(calls).toHaveLength(3);
      expect(await Promise.all(answers)).toEqual([200, 200, 200]);
      expect(last).toBe("run_completed");
    }
  });
});
