import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { STEP_STATEMENT, watchingStatements } from "../helpers/statements.js";
import { sseFrames } from "../helpers/sse.js";

/** Each step the run writer sent, as it sent them: its run and the kinds of its events. */
function watchSteps(steps: { run: string; kinds: string[] }[]) {
  return (text: string, params: unknown[] | undefined) => {
    if (!text.includes(STEP_STATEMENT)) return;
    for (const r of JSON.parse(String(params![0])) as { run_id: string; events: { kind: string }[] | null }[]) steps.push({ run: r.run_id, kinds: (r.events ?? []).map((e) => e.kind) });
  };
}
const of = (steps: { run: string; kinds: string[] }[], run: string | null) => steps.filter((s) => s.run === run).map((s) => s.kinds);

/**
 * A chat completion's deltas are relayed to its caller before they are stored, so they wait a
 * whole window before their first write: a completion shorter than the window is written once,
 * at its end, and its end is not queued behind a write of its first words. A run of
 * `POST /v1/runs` (whose readers get only what is stored) writes its first words at once.
 */
onEachDatabase("what a short chat completion writes, on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let worker: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    model = await startModelStandIn();
    worker = await startModelMachine(server, server.dev, "pat", model.url);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  const headers = () => ({ authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" });

  it("a completion its machine streamed over a few tens of ms is one write, with its end; a run's first words are written before its end (the control)", async () => {
    let chatRun: string | null = null;
    const steps: { run: string; kinds: string[] }[] = [];
    const completion = await watchingStatements(server.db, watchSteps(steps), async () => {
      const res = await server.fetch("/v1/chat/completions", {
        method: "POST",
        headers: headers(),
        body: JSON.stringify({ model: "auto", user: "pat", messages: [{ role: "user", content: "[paced] hi" }] }),
      });
      chatRun = res.headers.get("service-run-id");
      // The end's write has answered by the time the caller has the answer.
      return ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content;
    });
    expect(completion).toBe("Hello from the stand-in model.");
    const chatSteps = of(steps, chatRun);
    expect(chatSteps).toHaveLength(1);
    expect(chatSteps[0]).toContain("text_delta");
    expect(chatSteps[0].at(-1)).toBe("run_completed");
    // Every delta stored, once, with the end.
    const stored = await server.db.query<{ kind: string; data: { text?: string } }>(`SELECT kind, data FROM run_events WHERE run_id = $1 ORDER BY seq`, [chatRun]);
    expect(stored.filter((e) => e.kind === "text_delta").map((e) => e.data.text).join("")).toBe("Hello from the stand-in model.");

    let run: string | null = null;
    await watchingStatements(server.db, watchSteps(steps), async () => {
      const res = await server.fetch("/v1/runs", { method: "POST", headers: headers(), body: JSON.stringify({ user: "pat", prompt: "[paced] hi", route: { prefer: ["user-hardware"] } }) });
      run = res.headers.get("service-run-id");
      for await (const f of sseFrames(res)) if (f.event === "run_completed") break;
    });
    const runSteps = of(steps, run);
    // Its words went in steps of their own before the step with its end.
    expect(runSteps.length).toBeGreaterThanOrEqual(2);
    expect(runSteps.findIndex((k) => k.includes("text_delta"))).toBeLessThan(runSteps.findIndex((k) => k.includes("run_completed")));
  });
});
