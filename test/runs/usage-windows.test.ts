import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import WebSocket from "ws";
import { WORKER_FEATURES, workerMessage, type UsageWindow } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { closeRawWorkers, connectRawWorker, type RawWorker } from "../helpers/raw-worker.js";
import { runCalls } from "../helpers/run-calls.js";
import { startReceiver, verified, type Receiver } from "../helpers/webhook-receiver.js";

/**
 * Subscriptions that run out, with warning (issue 29): a machine tells the
 * service its agent CLIs' usage windows (`runtime_limits`, only once `welcome`
 * lists the feature); the service keeps the latest per runtime (a row every
 * instance reads), shows them in the compute read, routes around a runtime whose
 * window is `rejected` until its `resetsAt`, says so when nothing else is left,
 * and fails a run whose job was cut off by a spent window `usage_limit_reached`.
 */

const hello = workerMessage("hello", {
  client: "windows-test",
  version: "0",
  runtimes: [
    { name: "claude-code", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription", maxConcurrentJobs: 1 },
    { name: "codex", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription", maxConcurrentJobs: 1 },
  ],
});

onEachDatabase("subscription windows on $db.name", (db) => {
  let server: TestServer;
  const open: WebSocket[] = [];
  let users = 0;

  beforeAll(async () => {
    // The webhook receiver is on this machine: private addresses allowed for test endpoints.
    server = await startTestServerOn(db, { WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
  }, 60_000);
  afterEach(() => closeRawWorkers(open));
  let hook: Receiver | null = null;
  afterAll(async () => {
    await server?.close();
    await hook?.close();
    removeTempDirs();
  });

  const { startRun, ended, headers } = runCalls({ fetch: (p, i) => server.fetch(p, i), get dev() { return server.dev; } });
  const runtimeOf = async (runId: string) => ((await (await server.fetch(`/v1/runs/${runId}`, { headers: headers() })).json()) as { runtime: string | null }).runtime;
  const compute = async (user: string) =>
    ((await (await server.fetch(`/v1/users/${user}/compute`, { headers: headers() })).json()) as { machines: { hostname: string; runtimes: { name: string; limits?: { windows: UsageWindow[]; updatedAt: string } }[] }[] }).machines;

  async function machine(): Promise<{ user: string; w: RawWorker; hostname: string }> {
    const user = `windows-${++users}`;
    const m = await pairViaApi(server, server.dev, user);
    const w = await connectRawWorker(server.url, m.token, open);
    w.send(hello);
    const welcome = await w.next("welcome");
    // The service announces it takes the message: a worker sends it only then.
    expect(welcome.payload.features).toContain(WORKER_FEATURES.runtimeLimits);
    const [row] = await server.db.query<{ hostname: string }>(`SELECT hostname FROM machines WHERE id = $1`, [m.machineId]);
    return { user, w, hostname: row.hostname };
  }
  const limits = (w: RawWorker, runtime: string, windows: UsageWindow[]) => w.send(workerMessage("runtime_limits", { runtime, windows, updatedAt: new Date().toISOString() }));
  const storedLimits = (user: string, runtime: string) =>
    pollUntil(async () => (await compute(user))[0]?.runtimes.find((r) => r.name === runtime)?.limits, (l) => l !== undefined, 10_000, `${runtime}'s windows stored`);

  it("a spent 5-hour window: shown in the compute read, routed around (auto goes to the next runtime, then the app), the refusal names the window and its reset; after the reset it is routed again", async () => {
    const { user, w, hostname } = await machine();
    // Positive control: before any report, `claude-code` is routed to.
    const before = await startRun({ user, model: "claude-code", prompt: "hi", route: { prefer: ["user-subscription"] } });
    expect(before.status).toBe(200);
    const job0 = await w.next("job");
    expect(job0.payload.job.runtime).toBe("claude-code");
    w.send(workerMessage("job_event", { jobId: job0.payload.jobId, event: { type: "done", finishReason: "end_turn", output: "ok", usage: { inputTokens: 1, outputTokens: 1 } } }));
    await ended(before.runId!);

    // A warning is only shown: the runtime is still routed to.
    // Times as the service's (test) clock reads them.
    const at = (ms: number) => new Date(server.clock.now().getTime() + ms).toISOString();
    limits(w, "codex", [{ window: "5h", status: "warning", usedPercent: 93, resetsAt: at(3_600_000) }]);
    const resetsAt = at(10_000);
    limits(w, "claude-code", [{ window: "5h", status: "rejected", resetsAt }]);
    const shown = await storedLimits(user, "claude-code");
    expect(shown!.windows).toEqual([{ window: "5h", status: "rejected", resetsAt }]);
    expect((await storedLimits(user, "codex"))!.windows[0]).toMatchObject({ window: "5h", status: "warning", usedPercent: 93 });

    // `auto` under user-subscription: the spent claude-code is skipped, codex (warning, not spent) takes it.
    const auto = await startRun({ user, model: "auto", prompt: "hi", route: { prefer: ["user-subscription"] } });
    expect(auto.status).toBe(200);
    const job1 = await w.next("job");
    expect(job1.payload.job.runtime).toBe("codex");
    expect(await runtimeOf(auto.runId!)).toBe("codex");
    w.send(workerMessage("job_event", { jobId: job1.payload.jobId, event: { type: "done", finishReason: "end_turn", output: "ok", usage: { inputTokens: 1, outputTokens: 1 } } }));
    await ended(auto.runId!);

    // Only claude-code would serve it: refused, saying which window and when it resets.
    const refused = await startRun({ user, model: "claude-code", prompt: "hi", route: { prefer: ["user-subscription"] } });
    expect([refused.status, refused.error?.code]).toEqual([409, "no_compute"]);
    expect(refused.error?.message).toContain(`claude-code on ${user}'s ${hostname} has used its subscription's 5-hour window; it resets at ${resetsAt}`);
    expect(refused.error?.message).toMatch(/Retry once it resets/);
    // With the app route: handed back, the same words.
    const handed = await startRun({ user, model: "claude-code", prompt: "hi", route: { prefer: ["user-subscription", "app"] } });
    expect([handed.status, handed.error?.code]).toEqual([409, "serve_in_app"]);
    expect(handed.error?.message).toContain("has used its subscription's 5-hour window");
    expect(w.pending.filter((m) => m.type === "job")).toEqual([]);

    // Past resetsAt: claude-code is routed to again, with no new report.
    server.clock.advance(11);
    const after = await startRun({ user, model: "claude-code", prompt: "hi", route: { prefer: ["user-subscription"] } });
    expect([after.status, after.error?.message]).toEqual([200, undefined]);
    const job2 = await w.next("job");
    expect(job2.payload.job.runtime).toBe("claude-code");
    w.send(workerMessage("job_event", { jobId: job2.payload.jobId, event: { type: "done", finishReason: "end_turn", output: "ok", usage: { inputTokens: 1, outputTokens: 1 } } }));
    await ended(after.runId!);
  }, 60_000);

  it("a spent window outlives its machine's reconnect: routing (which reads the machine's runtimes with its connection) still goes around it, without a new report", async () => {
    const user = `windows-${++users}`;
    const m = await pairViaApi(server, server.dev, user);
    const connect = async () => {
      const w = await connectRawWorker(server.url, m.token, open);
      w.send(hello);
      await w.next("welcome");
      return w;
    };
    const runOn = async (w: RawWorker) => {
      const run = await startRun({ user, model: "auto", prompt: "hi", route: { prefer: ["user-subscription"] } });
      expect(run.status).toBe(200);
      const job = await w.next("job");
      w.send(workerMessage("job_event", { jobId: job.payload.jobId, event: { type: "done", finishReason: "end_turn", output: "ok", usage: { inputTokens: 1, outputTokens: 1 } } }));
      await ended(run.runId!);
      return job.payload.job.runtime;
    };
    const first = await connect();
    // Positive control: `auto` takes claude-code first while its window is not spent.
    expect(await runOn(first)).toBe("claude-code");
    limits(first, "claude-code", [{ window: "5h", status: "rejected", resetsAt: new Date(server.clock.now().getTime() + 3_600_000).toISOString() }]);
    await storedLimits(user, "claude-code");
    expect(await runOn(first)).toBe("codex");
    // The link drops and the machine says hello again, reporting nothing new.
    first.ws.close();
    await pollUntil(async () => (await server.db.query<{ i: string | null }>(`SELECT connected_instance AS i FROM machines WHERE id = $1`, [m.machineId]))[0].i, (i) => i === null, 10_000, "the machine offline");
    const again = await connect();
    expect(await runOn(again)).toBe("codex");
  }, 60_000);

  it("a job cut off by a spent window fails its run usage_limit_reached, the message naming the reset; a malformed report is refused and changes nothing", async () => {
    const { user, w } = await machine();
    const run = await startRun({ user, model: "codex", prompt: "hi", route: { prefer: ["user-subscription"] } });
    expect(run.status).toBe(200);
    const job = await w.next("job");
    const message = "Codex has used its subscription's 5-hour window; it resets at 2026-11-27T09:00:00.000Z.";
    w.send(workerMessage("job_event", { jobId: job.payload.jobId, event: { type: "failed", code: "usage_limit_reached", message, usage: { inputTokens: 3, outputTokens: 0 } } }));
    const end = await ended(run.runId!);
    expect([end.status, end.stopReason, end.error?.code, end.error?.message]).toEqual(["failed", "usage_limit_reached", "usage_limit_reached", message]);

    // Bounded and checked by the contract: a bad status or more than 8 windows is a bad message.
    w.send({ v: 1, type: "runtime_limits", payload: { runtime: "codex", windows: [{ window: "5h", status: "spent" }], updatedAt: new Date().toISOString() } });
    expect((await w.next("error")).payload.code).toBe("bad_message");
    w.send({ v: 1, type: "runtime_limits", payload: { runtime: "codex", windows: Array.from({ length: 9 }, (_, i) => ({ window: `${i}h`, status: "allowed" })), updatedAt: new Date().toISOString() } });
    expect((await w.next("error")).payload.code).toBe("bad_message");
    expect((await compute(user))[0].runtimes.find((r) => r.name === "codex")?.limits).toBeUndefined();
  }, 60_000);

  it("tells the app once when a window is spent and once when it resets: by its reset time, or when the CLI says it is usable again; a warning tells nothing", async () => {
    hook = await startReceiver();
    const created = await server.fetch("/v1/webhook_endpoints", {
      method: "POST",
      headers: { ...headers(), "content-type": "application/json" },
      body: JSON.stringify({ url: hook.url, events: ["runtime.window_spent", "runtime.window_reset"] }),
    });
    expect(created.status).toBe(201);
    const { secret } = (await created.json()) as { secret: string };
    const { user, w } = await machine();
    const at = (ms: number) => new Date(server.clock.now().getTime() + ms).toISOString();
    const facts = () => hook!.received.map((r) => verified(secret, r)).map((b) => [b.type, b.data.user, b.data.runtime, b.data.window, b.data.resetsAt]);

    // A warning is no fact; the 5-hour window spent, said twice: one fact, then its reset when the time passes.
    limits(w, "codex", [{ window: "5h", status: "warning", usedPercent: 93, resetsAt: at(3_600_000) }]);
    const soon = at(1500);
    limits(w, "claude-code", [{ window: "5h", status: "rejected", resetsAt: soon }]);
    await hook.waitFor(1);
    limits(w, "claude-code", [{ window: "5h", status: "rejected", resetsAt: soon }, { window: "7d", status: "allowed", usedPercent: 40 }]);
    await hook.waitFor(2);
    // The CLI saying it is usable after that reset tells nothing more.
    limits(w, "claude-code", [{ window: "5h", status: "allowed" }]);
    // The weekly window spent (reset a week away): its reset is told when the CLI reports it usable again.
    const weekly = at(7 * 86_400_000);
    limits(w, "codex", [{ window: "7d", status: "rejected", resetsAt: weekly }]);
    await hook.waitFor(3);
    limits(w, "codex", [{ window: "7d", status: "allowed" }]);
    await hook.waitFor(4);
    await new Promise((r) => setTimeout(r, 1000));
    expect(facts()).toEqual([
      ["runtime.window_spent", user, "claude-code", "5h", soon],
      ["runtime.window_reset", user, "claude-code", "5h", soon],
      ["runtime.window_spent", user, "codex", "7d", weekly],
      ["runtime.window_reset", user, "codex", "7d", weekly],
    ]);
  }, 60_000);
});
