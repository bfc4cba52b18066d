import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { onPostgres, withClient } from "../helpers/databases.js";
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
  let url: string;
  /** Calls of A's store to read a page of a run's stored events. */
  let pagesReadOnA = 0;
  /** Every step announced on the database (`NOTIFY svc_run_event`), by run id, heard by a LISTEN of the test's own. */
  const announced = new Map<string, number>();
  let listener: pg.Client;

  beforeAll(async () => {
    const made = await postgres.create();
    drop = made.drop;
    url = (made.target as { url: string }).url;
    a = await startTestServer(made.target, {}, { runningClock: true });
    b = await startTestServer(made.target, {}, { runningClock: true });
    const store = a.services.runStore;
    const eventPage = store.eventPage.bind(store);
    store.eventPage = (...args: Parameters<typeof eventPage>) => (pagesReadOnA++, eventPage(...args));
    listener = new pg.Client({ connectionString: url });
    await listener.connect();
    listener.on("notification", (n) => {
      const runId = (n.payload ?? "").split(" ")[0];
      announced.set(runId, (announced.get(runId) ?? 0) + 1);
    });
    await listener.query("LISTEN svc_run_event");
  }, 60_000);
  afterAll(async () => {
    await listener?.end();
    await a?.close();
    await b?.close();
    await drop?.();
    removeTempDirs();
  });

  const headers = () => ({ authorization: `Bearer ${a.dev.appKey}`, "content-type": "application/json" });

  /** Starts a `svc/echo` run on B (driven there) and reads its stream on B alone, answering its tool call on B. */
  async function runOnB(script: unknown[]) {
    const res = await b.fetch("/v1/runs", { method: "POST", headers: headers(), body: JSON.stringify({ user: "notice-user", model: "svc/echo", prompt: JSON.stringify(script), tools: [{ name: "lookup" }] }) });
    expect(res.status).toBe(200);
    const runId = res.headers.get("service-run-id")!;
    const onB: SseFrame[] = [];
    for await (const f of sseFrames(res)) {
      onB.push(f);
      if (f.event === "tool_call") {
        const answer = await b.fetch(`/v1/runs/${runId}/tool_result`, { method: "POST", headers: headers(), body: JSON.stringify({ callId: f.data.callId, result: { found: true } }) });
        expect(answer.status).toBe(200);
      }
    }
    return { runId, onB };
  }

  /** A run's row as to whether a reader elsewhere marked it, and what the LISTEN above heard of it (after a moment for the last notification to arrive). */
  async function heard(runId: string) {
    await new Promise((r) => setTimeout(r, 200));
    const [row] = (await withClient(url, (c) => c.query<{ watched_elsewhere: boolean }>("SELECT watched_elsewhere FROM runs WHERE id = $1", [runId]))).rows;
    return { marked: row.watched_elsewhere, announced: announced.get(runId) ?? 0 };
  }

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
    return { runId, onA, onB, readsAfterAnswer: pagesReadOnA - readsBeforeAnswer };
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

  it("a run read only where it is driven announces none of its steps; read from another instance, it is marked and each step is announced (the control)", async () => {
    const script = [{ say: "looking it up" }, { call: "lookup" }, { say: "found {{result}}" }, { wait: 50 }, { say: "and done" }];
    const alone = await runOnB(script);
    expect(alone.onB.at(-1)!.event).toBe("run_completed");
    expect(await heard(alone.runId)).toEqual({ marked: false, announced: 0 });
    // Its history read on A once it has finished: nothing more will be stored, so A does not mark it.
    const history: SseFrame[] = [];
    for await (const f of sseFrames(await a.fetch(`/v1/runs/${alone.runId}/events`, { headers: { ...headers(), "last-event-id": "0" } }))) history.push(f);
    expect(history.map((f) => f.data)).toEqual(alone.onB.map((f) => f.data));
    expect(await heard(alone.runId)).toEqual({ marked: false, announced: 0 });

    const across = await runAcross(script);
    expect(across.onA.map((f) => f.data)).toEqual(across.onB.map((f) => f.data));
    const { marked, announced: steps } = await heard(across.runId);
    expect(marked).toBe(true);
    // At least the answer's turn, stored in two steps (the wait splits it), each its own notification (a step stored before A's mark is read from the rows).
    expect(steps).toBeGreaterThanOrEqual(2);
  });

  it("while an instance of a version before the marks is alive, every step is announced, as its readers expect; once it is gone, only marked runs again", async () => {
    const script = [{ call: "lookup" }, { say: "found {{result}}" }];
    const old = "inst_before_marks";
    await withClient(url, (c) => c.query("INSERT INTO server_instances (id, started_at, alive_at) VALUES ($1, $2, $2)", [old, b.clock.now()]));
    try {
      const during = await runOnB(script);
      expect(during.onB.at(-1)!.event).toBe("run_completed");
      const { marked, announced: steps } = await heard(during.runId);
      expect(marked).toBe(false);
      expect(steps).toBeGreaterThanOrEqual(2);
    } finally {
      await withClient(url, (c) => c.query("DELETE FROM server_instances WHERE id = $1", [old]));
    }
    const after = await runOnB(script);
    expect(await heard(after.runId)).toEqual({ marked: false, announced: 0 });
  });
});
