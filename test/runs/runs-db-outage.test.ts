import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withClient } from "../helpers/databases.js";
import { privatePostgresAvailable, startPrivatePostgres, type PrivatePostgres } from "../helpers/private-postgres.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { sseFrames, type SseFrame } from "../helpers/sse.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { startModelMachine, type WorkerProcess } from "../helpers/worker.js";

/**
 * Runs in flight through a database outage, on a private Postgres cluster (never
 * the shared one): stopped with `pg_ctl stop -m immediate` for five seconds while
 * half the runs stream a model's answer and half wait on a tool call. The machine
 * never disconnects, so the runs go on: the driving instance holds their events in
 * memory and writes them once the database is back. Every run completes; what the
 * app read is every event once, in order, and equal to what is stored; the ledger
 * has each run once and each turn once.
 */
describe.skipIf(!privatePostgresAvailable)("runs in flight through a database outage (private Postgres cluster)", () => {
  let cluster: PrivatePostgres;
  let server: TestServer;
  let model: ModelStandIn;
  let worker: WorkerProcess;
  const RUNS = 10;

  beforeAll(async () => {
    cluster = await startPrivatePostgres();
    server = await startTestServer({ kind: "postgres", url: cluster.url }, {}, { runningClock: true });
    model = await startModelStandIn();
    worker = await startModelMachine(server, server.dev, "ada", model.url, { maxConcurrentJobs: RUNS });
  }, 120_000);

  afterAll(async () => {
    worker?.stop();
    await server?.close().catch(() => {});
    await model?.close();
    cluster?.remove();
    removeTempDirs();
  }, 60_000);

  const headers = () => ({ authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" });

  /** An app's request retried while the service answers 503 (the outage), as the SDK does. */
  async function retrying(path: string, init: RequestInit): Promise<Response> {
    for (let i = 0; ; i++) {
      const res = await server.fetch(path, init);
      if (res.status !== 503 || i > 60) return res;
      await res.text();
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** A run's stream as an app reads it: re-attached with Last-Event-ID when it breaks. */
  function follow(runId: string, first: Response, onFrame: (f: SseFrame) => void) {
    const frames: SseFrame[] = [];
    let drops = 0;
    const done = (async () => {
      let res = first;
      for (;;) {
        try {
          for await (const f of sseFrames(res)) {
            frames.push(f);
            onFrame(f);
          }
        } catch {
          /* broken: re-attached below */
        }
        const last = frames.at(-1);
        if (last && ["run_completed", "run_failed", "run_cancelled"].includes(String(last.event))) return;
        if (++drops > 20) throw new Error(`${runId}: its stream broke ${drops} times`);
        res = await retrying(`/v1/runs/${runId}/events`, { headers: { ...headers(), ...(last ? { "last-event-id": String(last.id) } : {}) } });
      }
    })();
    return { frames, done, drops: () => drops };
  }

  it("5 s of pg_ctl stop -m immediate while 10 runs stream and wait on tool calls: every run completes, no event lost or twice, the ledger exact", { timeout: 180_000 }, async () => {
    const started = await Promise.all(
      Array.from({ length: RUNS }, async (_, i) => {
        const res = await server.fetch("/v1/runs", { method: "POST", headers: headers(), body: JSON.stringify({ user: "ada", prompt: `Weather? [slow] #${i}`, model: "ollama/llama3.2:3b", route: { prefer: ["user-hardware"] }, tools: [{ name: "weather" }] }) });
        expect(res.status, res.status === 200 ? "" : await res.text()).toBe(200);
        return { i, runId: res.headers.get("service-run-id")!, res };
      }),
    );
    const calls = new Map<string, string>();
    const streams = started.map(({ runId, res }) => follow(runId, res, (f) => void (f.event === "tool_call" && calls.set(runId, String(f.data.callId)))));
    await expect.poll(() => calls.size, { timeout: 30_000 }).toBe(RUNS);
    const answer = (runId: string) => retrying(`/v1/runs/${runId}/tool_result`, { method: "POST", headers: headers(), body: JSON.stringify({ callId: calls.get(runId), result: { temp: 21 } }) });
    // The first half answered now: their second turn streams for 10 s (a word every 50 ms), across the outage.
    const streaming = started.slice(0, RUNS / 2);
    const waiting = started.slice(RUNS / 2);
    for (const a of await Promise.all(streaming.map(({ runId }) => answer(runId)))) expect(a.status).toBe(200);
    await expect.poll(() => streaming.every(({ i }) => streams[i].frames.filter((f) => f.event === "text_delta").length > 0), { timeout: 20_000 }).toBe(true);

    cluster.stop();
    const downAt = Date.now();
    // Down: the runs go on (their events held in memory until they can be stored), nothing fails, no stream breaks.
    await new Promise((r) => setTimeout(r, 5000));
    expect(streams.flatMap((s) => s.frames).filter((f) => f.event === "run_failed")).toEqual([]);
    expect(streams.map((s) => s.drops())).toEqual(streams.map(() => 0));
    cluster.start();
    console.log(`database down for ${Date.now() - downAt} ms`);

    // The other half answered once it is back (an answer is acknowledged only once stored: 503 until then).
    for (const a of await Promise.all(waiting.map(({ runId }) => answer(runId)))) expect(a.status).toBe(200);
    await Promise.all(streams.map((s) => s.done));
    console.log(`streams broken and re-attached: ${streams.map((s) => s.drops()).join(" ")}`);

    await withClient(cluster.url, async (c) => {
      for (const [k, { runId }] of started.entries()) {
        const seen = streams[k].frames;
        const seqs = seen.map((f) => Number(f.id));
        // What the app read: every event once, in order, ending with the run's completion.
        expect(seqs, `${runId}: ${seqs.join(" ")}`).toEqual(seqs.map((_, j) => j + 1));
        expect(seen.at(-1)!.event).toBe("run_completed");
        const stored = (await c.query<{ seq: number; kind: string; data: unknown }>("SELECT seq, kind, data FROM run_events WHERE run_id = $1 ORDER BY seq", [runId])).rows;
        // What is stored is what the app read.
        expect(stored.map((e) => `${e.seq} ${e.kind}`)).toEqual(seen.map((f) => `${f.id} ${f.event}`));
        expect(stored.map((e) => e.data)).toEqual(seen.map((f) => f.data));
        const usage = (await c.query<{ kind: string; unique_key: string }>("SELECT kind, unique_key FROM usage_rows WHERE run_id = $1 ORDER BY kind, unique_key", [runId])).rows;
        expect(usage.map((u) => `${u.kind} ${u.unique_key}`)).toEqual([`run run:${runId}`, `tokens tokens:${runId}:1`, `tokens tokens:${runId}:2`]);
        const [run] = (await c.query<{ status: string; turns: number; output: string; last_seq: number }>("SELECT status, turns, output, last_seq FROM runs WHERE id = $1", [runId])).rows;
        expect(run).toMatchObject({ status: "completed", turns: 2, output: "word ".repeat(200), last_seq: stored.length });
      }
    });
  });
  it("past RUN_DATABASE_OUTAGE_SECONDS a run fails `database_unavailable`, stored once the database is back; its machine's job is stopped", { timeout: 120_000 }, async () => {
    // A second instance of its own database on the same cluster, told to wait 1 s for the database.
    await withClient(cluster.url, (c) => c.query("CREATE DATABASE short_wait"));
    const url = cluster.url.replace(/\/postgres$/, "/short_wait");
    const short = await startTestServer({ kind: "postgres", url }, { RUN_DATABASE_OUTAGE_SECONDS: "1" }, { runningClock: true });
    const w = await startModelMachine(short, short.dev, "bo", model.url);
    try {
      const auth = { authorization: `Bearer ${short.dev.appKey}`, "content-type": "application/json" };
      const res = await short.fetch("/v1/runs", { method: "POST", headers: auth, body: JSON.stringify({ user: "bo", prompt: "Tell me [slow]", model: "ollama/llama3.2:3b", route: { prefer: ["user-hardware"] } }) });
      expect(res.status).toBe(200);
      const runId = res.headers.get("service-run-id")!;
      const frames: SseFrame[] = [];
      const reading = (async () => {
        for await (const f of sseFrames(res)) frames.push(f);
      })();
      await pollUntil(async () => frames.filter((f) => f.event === "text_delta").length, (n) => n > 0, 20_000, "text streaming");
      cluster.stop();
      await new Promise((r) => setTimeout(r, 3500));
      cluster.start();
      await reading;
      const last = frames.at(-1)!;
      expect(last.event).toBe("run_failed");
      expect(last.data.error).toMatchObject({ code: "database_unavailable" });
      expect(String((last.data.error as { message: string }).message)).toMatch(/unreachable for longer than the 1 s/);
      // Its machine's job was stopped then: the answer (6 s of text) was cut short.
      const said = frames.filter((f) => f.event === "text_delta").map((f) => String(f.data.text)).join("");
      expect(said.length).toBeGreaterThan(0);
      expect(said.length).toBeLessThan("word ".repeat(200).length);
      await withClient(url, async (c) => {
        const [run] = (await c.query<{ status: string; error: { code: string } }>("SELECT status, error FROM runs WHERE id = $1", [runId])).rows;
        expect(run).toMatchObject({ status: "failed", error: { code: "database_unavailable" } });
        const stored = (await c.query<{ seq: number }>("SELECT seq FROM run_events WHERE run_id = $1 ORDER BY seq", [runId])).rows.map((e) => e.seq);
        expect(stored).toEqual(frames.map((f) => Number(f.id)));
        const usage = (await c.query<{ kind: string }>("SELECT kind FROM usage_rows WHERE run_id = $1", [runId])).rows.map((u) => u.kind);
        expect(usage).toEqual(["run"]);
      });
    } finally {
      w.stop();
      await short.close().catch(() => {});
    }
  });
});
