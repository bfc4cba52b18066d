import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type PairedMachine, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { startReceiver, verified, type Receiver } from "../helpers/webhook-receiver.js";

type Event = { type: string; timestamp: string; data: Record<string, unknown> };

/**
 * The facts the service reports, made the real way: a machine paired through
 * the device flow, a real `svc-worker start` process connecting (online) and
 * killed (offline), and runs served on its model runtime (run.finished). Each
 * webhook is checked with the standardwebhooks library.
 */
onEachDatabase("webhook facts on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let hook: Receiver;
  let secret: string;
  let alice: PairedMachine;
  let worker: WorkerProcess | null = null;

  beforeAll(async () => {
    // The receivers are on this machine: test endpoints may reach private addresses (refused by default).
    server = await startTestServerOn(db, { WEBHOOK_RETRY_SCHEDULE: "0.2,0.4", WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
    model = await startModelStandIn();
    hook = await startReceiver();
    const res = await server.fetch("/v1/webhook_endpoints", { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json" }, body: JSON.stringify({ url: hook.url }) });
    expect(res.status).toBe(201);
    secret = ((await res.json()) as { secret: string }).secret;
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    await hook?.close();
    removeTempDirs();
  });

  /** Kills the worker and waits until its process (the one holding its folder's lock) is gone. */
  async function kill(w: WorkerProcess) {
    w.stop();
    await w.exited;
    const lock = path.join(w.home, "worker.lock");
    const dead = async () => {
      try {
        process.kill(Number(fs.readFileSync(lock, "utf8")), 0);
        return false;
      } catch {
        return true;
      }
    };
    await pollUntil(dead, (d) => d, 10_000, "the worker process gone");
  }

  /** Every webhook received so far, verified, in order. */
  const events = (): Event[] => hook.received.map((r) => verified(secret, r) as Event);
  const eventsOf = (type: string) => events().filter((e) => e.type === type);
  const waitForEvent = (type: string, count = 1) =>
    pollUntil(async () => eventsOf(type), (es) => es.length >= count, 20_000, `${count} ${type} webhook(s)`);

  it("reports machine.paired when the machine gets its token, machine.online when its worker says hello", async () => {
    alice = await pairViaApi(server, server.dev, "alice", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false } }, "alice-laptop");
    const [paired] = await waitForEvent("machine.paired");
    expect(paired.data).toEqual({ machineId: alice.machineId, user: "alice", hostname: "alice-laptop", platform: "linux" });

    worker = spawnWorker(["start"], alice.home);
    await worker.waitFor(/Connected/);
    const [online] = await waitForEvent("machine.online");
    expect(online.data).toEqual({ machineId: alice.machineId, user: "alice" });
  });

  it("reports run.finished once per run, with its outcome and usage, for a run and a chat completion", async () => {
    const chat = await server.fetch("/v1/chat/completions", {
      method: "POST",
      headers: { ...bearer(server.dev.appKey), "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", user: "alice", messages: [{ role: "user", content: "Hi" }] }),
    });
    expect(chat.status).toBe(200);
    const chatRunId = chat.headers.get("service-run-id");

    const run = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json" }, body: JSON.stringify({ user: "alice", prompt: "Hello" }) });
    expect(run.status).toBe(200);
    const runId = run.headers.get("service-run-id");
    await run.text(); // the stream ends with the run

    const finished = await waitForEvent("run.finished", 2);
    const byRun = new Map(finished.map((e) => [e.data.runId, e.data]));
    expect(byRun.get(chatRunId)).toEqual({
      runId: chatRunId,
      user: "alice",
      status: "completed",
      stopReason: "stop",
      source: "chat",
      usage: { inputTokens: 12, outputTokens: 7, costClass: "user_hardware" },
    });
    expect(byRun.get(runId)).toMatchObject({ runId, user: "alice", status: "completed", source: "runs", usage: { costClass: "user_hardware" } });
    // svc/echo is the service's own answer, not a run of the user's compute: no webhook.
    await server.fetch("/v1/chat/completions", {
      method: "POST",
      headers: { ...bearer(server.dev.appKey), "content-type": "application/json" },
      body: JSON.stringify({ model: "svc/echo", user: "alice", messages: [{ role: "user", content: "ping" }] }),
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(eventsOf("run.finished")).toHaveLength(2);
  });

  it("reports machine.offline when the worker's connection ends, and for a connection whose instance died", async () => {
    await kill(worker!);
    const [offline] = await waitForEvent("machine.offline");
    expect(offline.data).toEqual({ machineId: alice.machineId, user: "alice" });

    // An instance that died never saw its connection close: its machine's heartbeats stopped.
    const now = server.clock.now().getTime();
    const connectedAt = new Date(now - 120_000);
    await server.db.query("UPDATE machines SET connected_instance = 'inst_gone', connected_at = $2, last_heartbeat_at = $3 WHERE id = $1", [alice.machineId, connectedAt, new Date(now - 60_000)]);
    await server.services.webhooks.presence.sweep();
    await server.services.webhooks.presence.sweep(); // the same lapsed connection is one fact
    await waitForEvent("machine.offline", 2);
    await new Promise((r) => setTimeout(r, 300));
    expect(eventsOf("machine.offline")).toHaveLength(2);

    // When it connects again, it is online again.
    worker = spawnWorker(["start"], alice.home);
    await worker.waitFor(/Connected/);
    await waitForEvent("machine.online", 2);
    await kill(worker);
    await waitForEvent("machine.offline", 3);

    // Every fact once: one delivery per key, each delivered at the first try.
    await new Promise((r) => setTimeout(r, 300));
    expect(Object.fromEntries(["machine.paired", "machine.online", "machine.offline", "run.finished"].map((t) => [t, eventsOf(t).length]))).toEqual({
      "machine.paired": 1,
      "machine.online": 2,
      "machine.offline": 3,
      "run.finished": 2,
    });
    const res = await server.fetch("/v1/webhook_deliveries?limit=200", { headers: bearer(server.dev.appKey) });
    const log = (await res.json()) as { data: { id: string; type: string; status: string; attempts: unknown[] }[] };
    expect(log.data.map((d) => d.type).sort()).toEqual(events().map((e) => e.type).sort());
    expect(log.data.every((d) => d.status === "delivered" && d.attempts.length === 1)).toBe(true);
    expect(new Set(hook.received.map((r) => r.headers["webhook-id"])).size).toBe(hook.received.length);
  });

  it("reports machine.offline once when the app revokes a machine that is connected", async () => {
    worker = spawnWorker(["start"], alice.home);
    await worker.waitFor(/Connected/);
    await waitForEvent("machine.online", 3);
    const res = await server.fetch(`/v1/users/alice/machines/${alice.machineId}`, { method: "DELETE", headers: bearer(server.dev.appKey) });
    expect(res.status).toBe(200);
    const offline = await waitForEvent("machine.offline", 4);
    expect(offline.at(-1)!.data).toEqual({ machineId: alice.machineId, user: "alice" });
    // The hub then closes the revoked machine's connection: the same connection, no second fact.
    await new Promise((r) => setTimeout(r, 1000));
    expect(eventsOf("machine.offline")).toHaveLength(4);
    await kill(worker);
  });
});
