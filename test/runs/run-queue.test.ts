import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import WebSocket from "ws";
import { Svc, type RunEvent } from "@svc/sdk";
import { workerMessage, type JobEvent } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { closeRawWorkers, connectRawWorker, type RawWorker } from "../helpers/raw-worker.js";
import { runCalls } from "../helpers/run-calls.js";

/**
 * A full machine queues instead of refusing (issue 29): a run whose fitting
 * runtimes are all at their cap waits (`queued`, a `run_queued` event with its
 * place and deadline), first in first out per machine, and is sent when a slot
 * frees; past the machine's queue bound the next route is taken, else `429
 * compute_busy` with Retry-After; past the wait deadline the run fails
 * `compute_busy`. Every routing refusal says what is true: no machine, machine
 * offline, model not served, route not asked, machine busy.
 */

const hello = (cap: number) =>
  workerMessage("hello", {
    client: "queue-test",
    version: "0",
    runtimes: [
      { name: "ollama", kind: "model", costClass: "user_hardware", models: ["m1"], maxConcurrentJobs: cap },
      { name: "claude-code", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription", maxConcurrentJobs: 1 },
    ],
  });
const event = (jobId: string, e: JobEvent) => workerMessage("job_event", { jobId, event: e });
const done = (jobId: string, output = "ok") => event(jobId, { type: "done", finishReason: "stop", output, usage: { inputTokens: 1, outputTokens: 1 } });

/** This server's `svc_run_routes_total`, by how the route was chosen. */
async function routedBy(server: TestServer): Promise<Record<"memory" | "rows" | "rerouted", number>> {
  const text = (await server.services.metrics.scrape()).body;
  const of = (how: string) => Number(new RegExp(`^svc_run_routes_total\\{how="${how}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? NaN);
  return { memory: of("memory"), rows: of("rows"), rerouted: of("rerouted") };
}

onEachDatabase("a full machine queues on $db.name", (db) => {
  /** Default queue settings (100 runs, 600 s): the ten runs. */
  let server: TestServer;
  /** A queue of 2 runs per machine and a 3 s wait, so both bounds are reached in seconds. */
  let tight: TestServer;
  let model: ModelStandIn;
  let svc: Svc;
  const open: WebSocket[] = [];
  const workers: WorkerProcess[] = [];
  let users = 0;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    tight = await startTestServerOn(db, { RUN_QUEUE_PER_MACHINE: "2", RUN_QUEUE_WAIT_SECONDS: "3" }, { runningClock: true });
    model = await startModelStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
  }, 60_000);
  afterEach(() => closeRawWorkers(open));
  afterAll(async () => {
    for (const w of workers) w.stop();
    await server?.close();
    await tight?.close();
    await model?.close();
    removeTempDirs();
  });

  const { startRun, getRun, ended } = runCalls({ fetch: (p, i) => tight.fetch(p, i), get dev() { return tight.dev; } });
  const storedKinds = async (runId: string) => (await tight.db.prisma.runEvent.findMany({ where: { runId }, orderBy: { seq: "asc" } })).map((e) => e.data as { kind: string; place?: number; deadlineAt?: string; reason?: string });

  async function rawMachine(cap: number): Promise<{ user: string; w: RawWorker }> {
    const user = `queue-${++users}`;
    const m = await pairViaApi(tight, tight.dev, user);
    const w = await connectRawWorker(tight.url, m.token, open);
    w.send(hello(cap));
    await w.next("welcome");
    return { user, w };
  }

  it("ten runs at once on a real svc-worker with a cap of 4: four run, six wait with their places, all complete, and the machine never gets a job past its cap", async () => {
    const user = `ten-${++users}`;
    const worker = await startModelMachine(server, server.dev, user, model.url, { maxConcurrentJobs: 4 });
    workers.push(worker);
    const routedBefore = await routedBy(server);
    // Held by the stand-in until all ten are placed: four answering, six waiting on the service.
    const runs = Array.from({ length: 10 }, (_, i) => svc.runs.create({ user, prompt: `[hold] run ${i}`, route: { prefer: ["user-hardware"] } }));
    const seen = Promise.all(
      runs.map(async (run) => {
        const events: RunEvent[] = [];
        for await (const e of run) events.push(e);
        return events;
      }),
    );
    const statuses = () => server.db.query<{ status: string }>(`SELECT r.status::text AS status, r.error FROM runs r JOIN end_users u ON u.id = r.end_user_id WHERE u.external_id = $1`, [user]);
    await pollUntil(statuses, (rows) => rows.length === 10 && rows.filter((r) => r.status === "queued").length === 6, 30_000, "six runs queued");
    await pollUntil(async () => model.inFlight.now, (n) => n === 4, 10_000, "four answers in flight");
    expect(model.inFlight.max).toBe(4);
    model.release();
    const events = await seen;
    const queued = events.map((e) => e.filter((x) => x.kind === "run_queued"));
    // Six waited, each told its place (1-6 in the order they came) and its deadline, then told again as it moved up (same deadline).
    const places = queued.filter((q) => q.length > 0).map((q) => q.map((e) => (e.kind === "run_queued" ? e.place : 0)));
    expect(places).toHaveLength(6);
    expect(places.map((p) => p[0]).sort()).toEqual([1, 2, 3, 4, 5, 6]);
    for (const p of places) expect(p, JSON.stringify(places)).toEqual([...p].sort((a, b) => b - a).filter((x, i, all) => all.indexOf(x) === i));
    expect(places.some((p) => p.length > 1), "some run moved up the queue and was told").toBe(true);
    for (const q of queued) expect(new Set(q.map((e) => (e.kind === "run_queued" ? e.deadlineAt : ""))).size).toBeLessThanOrEqual(1);
    for (const q of queued.flat()) expect(q).toMatchObject({ runtime: "ollama", reason: expect.stringMatching(/running 4 jobs, its cap/) });
    for (const e of events) {
      expect(e.at(-1)?.kind).toBe("run_completed");
      // A waiting run is told so before any of its text.
      const q = e.findIndex((x) => x.kind === "run_queued");
      if (q >= 0) expect(q).toBeLessThan(e.findIndex((x) => x.kind === "text_delta"));
    }
    // The machine never had more than its cap at once.
    expect(model.inFlight.max).toBe(4);
    expect(worker.stdout).not.toMatch(/at_capacity|refused/);
    // Routed in memory (the machine's connection is here), each start one statement; a start that found the slots taken meanwhile was routed again from the rows, none read them first.
    const routed = await routedBy(server);
    expect(routed.memory - routedBefore.memory + routed.rerouted - routedBefore.rerouted).toBe(10);
    expect(routed.memory - routedBefore.memory).toBeGreaterThan(0);
    expect(routed.rows).toBe(routedBefore.rows);
  }, 120_000);

  it("past the machine's queue bound: compute_busy (429, Retry-After) or the next route; past the wait deadline the run fails compute_busy and its job is never sent", async () => {
    const { user, w } = await rawMachine(1);
    const hw = { route: { prefer: ["user-hardware"] } };
    const first = await startRun({ user, prompt: "one", ...hw });
    expect(first.status).toBe(200);
    const job1 = await w.next("job");

    // Two wait (the bound), in order.
    const second = await startRun({ user, prompt: "two", ...hw });
    const third = await startRun({ user, prompt: "three", ...hw });
    expect([second.status, third.status]).toEqual([200, 200]);
    // Each run's wait is stored by its own flush: wait for both (the third's may land before the second's).
    await pollUntil(() => getRun(second.runId!), (r) => r.status === "queued", 5000, "the second run queued");
    await pollUntil(() => getRun(third.runId!), (r) => r.status === "queued", 5000, "the third run queued");
    expect((await storedKinds(second.runId!)).find((e) => e.kind === "run_queued")).toMatchObject({ place: 1 });
    expect((await storedKinds(third.runId!)).find((e) => e.kind === "run_queued")).toMatchObject({ place: 2 });
    expect(w.pending.filter((p) => p.type === "job")).toEqual([]);

    // A fourth: the queue is full. Busy, not offline: 429 with Retry-After; with `app` allowed, a counted handback that says why.
    const busy = await startRun({ user, prompt: "four", ...hw });
    expect([busy.status, busy.error?.code, busy.retryAfter]).toEqual([429, "compute_busy", "5"]);
    expect(busy.error?.message).toMatch(/online but busy: ollama \(its cap of 1 job running, 2 runs waiting\)/);
    expect(busy.error?.message).not.toMatch(/offline|no reachable|none of/);
    const handedBack = await startRun({ user, prompt: "four", route: { prefer: ["user-hardware", "app"] } });
    expect([handedBack.status, handedBack.error?.code]).toEqual([409, "serve_in_app"]);
    expect(handedBack.error?.message).toMatch(/online but busy/);

    // First in, first out: the slot freed by the first goes to the second, then to the third.
    w.send(done(job1.payload.jobId, "first"));
    const job2 = await w.next("job");
    expect(job2.payload.job.kind === "model_turn" && job2.payload.job.messages.at(-1)).toMatchObject({ content: "two" });
    await pollUntil(() => getRun(second.runId!), (r) => r.status === "running", 5000, "the second run running once sent");
    w.send(done(job2.payload.jobId, "second"));
    const job3 = await w.next("job");
    expect(job3.payload.job.kind === "model_turn" && job3.payload.job.messages.at(-1)).toMatchObject({ content: "three" });

    // One more waits behind the third, and waits past its 3 s deadline: compute_busy, its job never sent.
    const late = await startRun({ user, prompt: "late", ...hw });
    expect(late.status).toBe(200);
    const failed = await ended(late.runId!, 10_000);
    expect(failed).toMatchObject({ status: "failed", stopReason: "compute_busy", error: { code: "compute_busy" } });
    expect(failed.error?.message).toMatch(/waited 3 s .* for a free slot of ollama/);
    w.send(done(job3.payload.jobId, "third"));
    expect(await ended(third.runId!)).toMatchObject({ status: "completed", output: "third" });
    expect(await ended(first.runId!)).toMatchObject({ status: "completed", output: "first" });
    expect(await ended(second.runId!)).toMatchObject({ status: "completed", output: "second" });
    await new Promise((r) => setTimeout(r, 300));
    expect(w.pending.filter((p) => p.type === "job")).toEqual([]);
    // Each queued run's stored events: run_started, run_queued, then its turn; the late one's ends with the failure.
    expect((await storedKinds(late.runId!)).map((e) => e.kind)).toEqual(["run_started", "run_queued", "run_failed"]);
  }, 60_000);

  it("every refusal says what is true: no machine, machine offline, model not served, route not asked", async () => {
    // No machine paired.
    const nobody = await startRun({ user: `nobody-${++users}`, prompt: "hi", route: { prefer: ["user-hardware"] } });
    expect([nobody.status, nobody.error?.code]).toEqual([409, "no_compute"]);
    expect(nobody.error?.message).toMatch(/has no machine paired/);

    // Paired, never connected (then connected and gone: offline, with when it was last seen).
    const offlineUser = `offline-${++users}`;
    const m = await pairViaApi(tight, tight.dev, offlineUser);
    const never = await startRun({ user: offlineUser, prompt: "hi", route: { prefer: ["user-hardware"] } });
    expect(never.error?.message).toMatch(/none of .*'s 1 paired machine is online: never connected/);
    const w = await connectRawWorker(tight.url, m.token, open);
    w.send(hello(4));
    await w.next("welcome");
    // Positive control: online, the same request runs.
    const online = await startRun({ user: offlineUser, prompt: "hi", route: { prefer: ["user-hardware"] } });
    expect(online.status).toBe(200);
    await w.next("job");
    w.ws.close();
    await pollUntil(() => tight.db.query<{ connected_instance: string | null }>(`SELECT connected_instance FROM machines WHERE id = $1`, [m.machineId]), (rows) => rows[0]?.connected_instance === null, 10_000, "the machine offline");
    const gone = await startRun({ user: offlineUser, prompt: "hi", route: { prefer: ["user-hardware"] } });
    expect(gone.error?.message).toMatch(/none of .*'s 1 paired machine is online: last seen \d+ s ago/);

    // Online, but the model is not served: what is, and how to list it.
    const { user } = await rawMachine(4);
    const other = await startRun({ user, model: "qwen9", prompt: "hi", route: { prefer: ["user-hardware"] } });
    expect([other.status, other.error?.code]).toEqual([409, "no_compute"]);
    expect(other.error?.message).toMatch(/is online but none serves qwen9: it serves claude-code, ollama\/m1 \(GET \/v1\/models\?user=/);
    // Served, but only on a route the request did not ask for.
    const agent = await startRun({ user, model: "claude-code", prompt: "hi", route: { prefer: ["user-hardware"] } });
    expect(agent.error?.message).toMatch(/\(claude-code\) is on route user-subscription, which this request does not ask for \(user-hardware\)/);
  }, 60_000);
});
