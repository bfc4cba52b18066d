import { afterAll, beforeAll, expect, it } from "vitest";
import type { WebSocket } from "ws";
import { onPGlite } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { answerNothing, closeRawWorkers, connectWorkerDouble } from "../helpers/raw-worker.js";

/**
 * The heartbeat bucket follows the interval the service tells the worker: with a
 * short heartbeat timeout (3 s: a beat each second) an honest worker is never
 * taken for a flood. A bucket fixed at one beat per 3 s closed it (4029) after
 * about 15 s. The bucket is in memory: one database is enough.
 */
onPGlite("heartbeats at the interval told, on $db.name", (db) => {
  let server: TestServer;
  const open: WebSocket[] = [];

  beforeAll(async () => {
    server = await startTestServerOn(db, { WORKER_HEARTBEAT_TIMEOUT_SECONDS: "3" });
  });
  afterAll(async () => {
    await closeRawWorkers(open);
    await server?.close();
    removeTempDirs();
  });

  it("a worker beating every second for 20 s stays connected", async () => {
    const m = await pairViaApi(server, server.dev, "steady");
    const double = await connectWorkerDouble(server.url, m.token, answerNothing, undefined, open);
    let closed: { code: number; reason: string } | null = null;
    void double.closed.then((c) => (closed = c));
    await new Promise((r) => setTimeout(r, 20_000));
    expect(closed).toBeNull();
  }, 40_000);
});
