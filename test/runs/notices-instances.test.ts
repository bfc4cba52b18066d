import { afterAll, beforeAll, expect, it } from "vitest";
import { onPostgres } from "../helpers/databases.js";
import { removeTempDirs } from "../helpers/process.js";
import { sseFrames, type SseFrame } from "../helpers/sse.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

/**
 * A run driven on B, its stream read on A (two instances on one Postgres): each
 * stored step reaches A by its notification, with its events when they are short
 * (`server/runs/notices.ts`), so A's reader does not read them back; a step too
 * long for a notification is read from the rows. Either way the reader gets every
 * event once, in order, as the driver's own stream does.
 */
onPostgres("a run's events across instances on postgres", (postgres) => {
  let a: TestServer;
  let b: TestServer;
  let drop: () => Promise<void>;
  /** Calls of A's store to read a page of a run's stored events. */
  let pagesReadOnA = 0;

  beforeAll(async () => {
    const made = await postgres.create();
    drop = made.drop;
    a = await startTestServer(made.target, {}, { runningClock: true });
    b = await startTestServer(made.target, {}, { runningClock: true });
    const store = a.services.runStore;
    const eventPage = store.eventPage.bind(store);
    store.eventPage = (...args: Parameters<typeof eventPage>) => (pagesReadOnA++, eventPage(...args));
  }, 60_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await drop?.();
    removeTempDirs();
  });

  const headers = () => ({ authorization: `Bearer ${a.dev.appKey}`, "content-type": "application/json" });

  /** Starts a `svc/echo` run on B (driven there) and reads its stream on A from the start, answering its tool call on B. */
  async function runAcross(script: unknown[]) {
    const res = await b.fetch("/v1/runs", { method: "POST", headers: headers(), body: JSON.stringify({ user: "notice-user", model: "svc/echo", prompt: JSON.stringify(script), tools: [{ name: "lookup" }] }) });
    expect(res.status).toBe(200);
    const runId = res.headers.get("service-run-id")!;
    const onB: SseFrame[] = [];
    const driven = (async () => {
      for await (const f of sseFrames(res)) onB.push(f);
    })();
    const onA: SseFrame[] = [];
    let readsBeforeAnswer = -1;
    const stream = await a.fetch(`/v1/runs/${runId}/events`, { headers: { ...headers(), "last-event-id": "0" } });
    expect(stream.status).toBe(200);
    for await (const f of sseFrames(stream)) {
      onA.push(f);
      if (f.event === "tool_call") {
        readsBeforeAnswer = pagesReadOnA;
        const answer = await b.fetch(`/v1/runs/${runId}/tool_result`, { method: "POST", headers: headers(), body: JSON.stringify({ callId: f.data.callId, result: { found: true } }) });
        expect(answer.status).toBe(200);
      }
    }
    await driven;
    return { onA, onB, readsAfterAnswer: pagesReadOnA - readsBeforeAnswer };
  }

  const ids = (frames: SseFrame[]) => frames.map((f) => Number(f.id));

  it("short steps come with their notification: A's reader reads nothing after the tool call, and gets every event once, in order", async () => {
    const { onA, onB, readsAfterAnswer } = await runAcross([{ say: "looking it up" }, { call: "lookup", arguments: { q: 1 } }, { say: "found {{result}}" }, { wait: 50 }, { say: "and done" }]);
    expect(onA.map((f) => f.event)).toEqual(onB.map((f) => f.event));
    expect(ids(onA)).toEqual(onA.map((_, i) => i + 1));
    expect(onA.map((f) => f.data)).toEqual(onB.map((f) => f.data));
    expect(onA.at(-1)!.event).toBe("run_completed");
    // The answer's turn was stored in more than one step (the wait splits it), each reaching A in its notification.
    expect(readsAfterAnswer).toBe(0);
  });

  it("a step longer than a notification takes is read from the rows, and nothing is lost", async () => {
    const long = "word ".repeat(3_000);
    const { onA, onB, readsAfterAnswer } = await runAcross([{ call: "lookup" }, { say: long }]);
    expect(onA.map((f) => f.event)).toEqual(onB.map((f) => f.event));
    expect(ids(onA)).toEqual(onA.map((_, i) => i + 1));
    expect(onA.map((f) => f.data)).toEqual(onB.map((f) => f.data));
    expect(readsAfterAnswer).toBeGreaterThan(0);
  });
});
