import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { bearer } from "../helpers/requests.js";

/**
 * One app cannot hold the instance's streams: past `MAX_STREAMS_PER_APP` open
 * event streams in one app and environment, a new one (a run start, a re-attach,
 * a streamed chat completion) is `429 rate_limited` with `Retry-After`, refused
 * before anything starts; another app is not affected, and a closed stream frees
 * its slot at once.
 */
onEachDatabase("event streams per app on $db.name", (db) => {
  const MAX = 3;
  let server: TestServer;
  let model: ModelStandIn;
  let worker: WorkerProcess;
  const open: AbortController[] = [];

  beforeAll(async () => {
    server = await startTestServerOn(db, { MAX_STREAMS_PER_APP: String(MAX) }, { runningClock: true });
    model = await startModelStandIn();
    const alice = await pairViaApi(server, server.dev, "alice", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
    worker = spawnWorker(["start"], alice.home);
    await worker.waitFor(/Connected/);
  }, 60_000);
  afterAll(async () => {
    for (const c of open) c.abort();
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  const post = (path: string, key: string, body: unknown, signal?: AbortSignal) =>
    server.fetch(path, { method: "POST", headers: { ...bearer(key), "content-type": "application/json" }, body: JSON.stringify(body), signal });
  const counts = async () => {
    const runs = await server.db.query<{ n: number }>("SELECT count(*)::int AS n FROM runs");
    const rows = await server.db.query<{ n: number }>("SELECT count(*)::int AS n FROM usage_rows");
    return { runs: runs[0].n, rows: rows[0].n };
  };

  it("past the limit a run start, a re-attach and a streamed chat completion are 429 with Retry-After and create nothing; another app is not affected; a closed stream frees its slot", async () => {
    const runIds: string[] = [];
    for (let i = 0; i < MAX; i++) {
      const c = new AbortController();
      open.push(c);
      const res = await post("/v1/runs", server.dev.appKey, { user: "alice", prompt: `Talk slowly [slow] ${i}` }, c.signal);
      expect(res.status).toBe(200);
      runIds.push(res.headers.get("service-run-id")!);
    }
    expect(server.services.streamSlots.held({ appId: server.dev.appId, environment: "test" })).toBe(MAX);

    const before = await counts();
    const start = await post("/v1/runs", server.dev.appKey, { user: "alice", prompt: "One more [slow]" });
    expect(start.status).toBe(429);
    expect(start.headers.get("retry-after")).toBe("1");
    expect((await start.json()).error).toMatchObject({ code: "rate_limited", type: "rate_limit_error" });
    const reattach = await server.fetch(`/v1/runs/${runIds[0]}/events`, { headers: bearer(server.dev.appKey) });
    expect(reattach.status).toBe(429);
    expect((await reattach.json()).error.code).toBe("rate_limited");
    const chat = await post("/v1/chat/completions", server.dev.appKey, { model: "svc/echo", user: "alice", stream: true, messages: [{ role: "user", content: "hi" }] });
    expect(chat.status).toBe(429);
    await chat.text();
    // Refused before anything started: no run, no ledger row.
    expect(await counts()).toEqual(before);
    // An answer that is not a stream is not limited.
    expect((await server.fetch(`/v1/runs/${runIds[0]}`, { headers: bearer(server.dev.appKey) })).status).toBe(200);

    // Another app's streams are its own.
    const other = await server.services.keys.createApp("Other app", "test");
    const echo = await post("/v1/chat/completions", other.appKey, { model: "svc/echo", user: "bob", stream: true, messages: [{ role: "user", content: "hi" }] });
    expect(echo.status).toBe(200);
    expect(await echo.text()).toContain("[DONE]");

    // A stream closed by its reader frees its slot: the re-attach now goes through.
    open[0].abort();
    let again: Response | null = null;
    for (let i = 0; i < 50; i++) {
      const res = await server.fetch(`/v1/runs/${runIds[0]}/events`, { headers: bearer(server.dev.appKey) });
      if (res.status === 200) {
        again = res;
        break;
      }
      await res.text();
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(again?.status).toBe(200);
    await again!.body!.cancel();
  }, 60_000);
});
