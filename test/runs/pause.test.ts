import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Svc, type RunEvent, type RunStream } from "@svc/sdk";
import { onEachDatabase, onPostgres } from "../helpers/databases.js";
import { startTestServer, startTestServerOn, type TestServer } from "../helpers/server.js";
import { pollUntil } from "../helpers/process.js";
import { bearer, expectError } from "../helpers/requests.js";
import { startReceiver, verified, type Receiver } from "../helpers/webhook-receiver.js";

/**
 * Runs that pause at their budget instead of failing, on `svc/echo` (no machine: its
 * turns, tool calls and token counts are the engine's own, like any model run's): the
 * budget reached between turns pauses the run, the app raising it resumes the same run;
 * a pause expires (`pause_expired`), a paused run is cancelled; the `run.paused` and
 * `run.resumed` webhooks, signed. The plan's ceiling pausing a run on a user's machine,
 * and the upgrade resuming it, are in runs.test.ts; across instances, below.
 */

/** A script: say something, call `weather`, then answer with its result (two model turns). */
const TWO_TURNS = JSON.stringify([{ say: "Looking it up." }, { call: "weather", arguments: { city: "Paris" } }, { say: "It is {{result}}." }]);
const weather = { name: "weather", run: async () => "sunny" };

function reading(run: RunStream): { events: RunEvent[]; done: Promise<void> } {
  const events: RunEvent[] = [];
  const done = (async () => {
    for await (const e of run) events.push(e);
  })();
  return { events, done };
}

const seqsOf = async (server: TestServer, runId: string) =>
  (await server.db.query<{ seq: number }>(`SELECT seq FROM run_events WHERE run_id = $1 ORDER BY seq`, [runId])).map((r) => Number(r.seq));

onEachDatabase("runs paused at their budget on $db.name", (db) => {
  let server: TestServer;
  let svc: Svc;
  let receiver: Receiver;
  let secret: string;

  beforeAll(async () => {
    // A pause is kept 3 s here (a day by default), so its expiry is seen.
    server = await startTestServerOn(db, { RUN_PAUSE_MAX_SECONDS: "3", WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    receiver = await startReceiver();
    const endpoint = await svc.webhookEndpoints.create({ url: receiver.url, events: ["run.paused", "run.resumed"] });
    secret = endpoint.secret;
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await receiver?.close();
  });

  const post = (path: string, body: unknown) => server.fetch(path, { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json" }, body: JSON.stringify(body) });

  it("a run reaching its token budget pauses between turns, holds there, and resumes where it stopped when the app raises it; events contiguous, ledger exact, webhooks once each", async () => {
    const run = svc.runs.create({ user: "bud-alice", model: "svc/echo", prompt: TWO_TURNS, tools: [weather], budget: { maxTokens: 3 } });
    const { events, done } = reading(run);
    const runId = await run.runId;
    const paused = await pollUntil(() => svc.runs.get(runId), (r) => r.status === "paused", 10_000, "the run paused");
    expect(paused).toMatchObject({ turns: 1, budget: { maxMicros: null, maxTokens: 3 } });
    const pause = await pollUntil(async () => events.find((e) => e.kind === "run_paused"), (e) => e !== undefined);
    if (pause?.kind !== "run_paused") throw new Error("no run_paused");
    expect(pause.limit).toBe("run_budget");
    expect(pause.budget).toMatchObject({ maxTokens: 3, maxMicros: null, usedMicros: "0", reached: true, note: null });
    expect(pause.budget!.usedTokens).toBeGreaterThanOrEqual(3);
    expect(pause.message).toMatch(/used its budget \(\d+ of 3 tokens\)/);
    expect(pause.resume).toMatch(/POST \/v1\/runs\/:id\/budget/);
    // Held: no next turn while the budget holds (a look finds it still reached).
    await new Promise((r) => setTimeout(r, 400));
    expect(await svc.runs.get(runId)).toMatchObject({ status: "paused", turns: 1 });
    // A raise still under what it used keeps it paused.
    const low = await svc.runs.raiseBudget(runId, { maxTokens: 4, user: "bud-alice" });
    expect(low.budget.maxTokens).toBe(4);
    await new Promise((r) => setTimeout(r, 300));
    if (low.budget.usedTokens >= 4) expect((await svc.runs.get(runId)).status).toBe("paused");
    // The raise that lifts it: the same run goes on at once.
    const raised = await svc.runs.raiseBudget(runId, { maxTokens: 10_000 });
    expect(raised).toMatchObject({ runId, budget: { maxTokens: 10_000, reached: false } });
    const result = await run.result();
    await done;
    expect(result).toMatchObject({ status: "completed", output: "It is sunny." });
    expect(events.find((e) => e.kind === "run_resumed")).toMatchObject({ limit: "run_budget", reason: "budget_raised" });
    expect(await svc.runs.get(runId)).toMatchObject({ status: "completed", turns: 2, pausedAt: null, budget: { maxTokens: 10_000 } });
    const seqs = await seqsOf(server, runId);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    const rows = await server.db.prisma.usageRow.findMany({ where: { runId } });
    expect(rows.map((r) => r.kind).sort()).toEqual(["echo", "tokens", "tokens"]);
    // The webhooks: one run.paused, one run.resumed, signed, with the pause's numbers.
    const got = (await receiver.waitFor(2)).map((r) => verified(secret, r)).filter((p) => p.data.runId === runId);
    expect(got.map((p) => p.type).sort()).toEqual(["run.paused", "run.resumed"]);
    expect(got.find((p) => p.type === "run.paused")!.data).toMatchObject({ runId, user: "bud-alice", limit: "run_budget", pausedAt: pause.pausedAt, expiresAt: pause.expiresAt });
    expect(got.find((p) => p.type === "run.resumed")!.data).toMatchObject({ runId, user: "bud-alice", limit: "run_budget", reason: "budget_raised" });
  });

  it("a run paused past RUN_PAUSE_MAX_SECONDS fails pause_expired; a paused run is cancelled at once; a budget on a finished run is 409", async () => {
    const expiring = svc.runs.create({ user: "bud-bob", model: "svc/echo", prompt: TWO_TURNS, tools: [weather], budget: { maxTokens: 1 } });
    const cancelled = svc.runs.create({ user: "bud-bob", model: "svc/echo", prompt: TWO_TURNS, tools: [weather], budget: { maxTokens: 1 } });
    const [expiringId, cancelledId] = [await expiring.runId, await cancelled.runId];
    for (const id of [expiringId, cancelledId]) await pollUntil(() => svc.runs.get(id), (r) => r.status === "paused", 10_000, "paused");
    await svc.runs.cancel(cancelledId, { reason: "not worth it" });
    expect(await cancelled.result()).toMatchObject({ status: "cancelled" });
    const expired = await expiring.result();
    expect(expired).toMatchObject({ status: "failed", stopReason: "pause_expired", error: { code: "pause_expired" } });
    expect(expired.error!.message).toMatch(/RUN_PAUSE_MAX_SECONDS/);
    // The control: a run without a budget on the same script runs through.
    expect(await svc.runs.create({ user: "bud-bob", model: "svc/echo", prompt: TWO_TURNS, tools: [weather] }).result()).toMatchObject({ status: "completed" });
    await expectError(await post(`/v1/runs/${expiringId}/budget`, { maxTokens: 100 }), 409, "run_finished");
    await expectError(await post(`/v1/runs/run_nope/budget`, { maxTokens: 100 }), 404, "not_found");
    await expectError(await post(`/v1/runs/${expiringId}/budget`, { maxTokens: 100, user: "someone-else" }), 404, "not_found");
    await expectError(await post(`/v1/runs/${expiringId}/budget`, {}), 400, "invalid_request");
  });

  it("takes a budget in micros as a string, says when it can never be reached (a free route), and refuses a number or an empty budget", async () => {
    const run = svc.runs.create({ user: "bud-carol", model: "svc/echo", prompt: "hello", budget: { maxMicros: "2500000" } });
    const { events, done } = reading(run);
    await run.result();
    await done;
    expect(events[0]).toMatchObject({ kind: "run_started", budget: { maxMicros: "2500000", maxTokens: null, note: expect.stringMatching(/svc\/echo is free: maxMicros is never reached/) } });
    await expectError(await post("/v1/runs", { user: "bud-carol", model: "svc/echo", prompt: "x", budget: { maxMicros: 2500000 } }), 400, "invalid_request");
    await expectError(await post("/v1/runs", { user: "bud-carol", model: "svc/echo", prompt: "x", budget: {} }), 400, "invalid_request");
    await expectError(await post("/v1/runs", { user: "bud-carol", model: "svc/echo", prompt: "x", budget: { maxTokens: 0 } }), 400, "invalid_request");
  });

  it("allowance.threshold on spend: a plan whose allowance is unlimited is measured against its ceiling, at the thresholds the app set; [] sends none", async () => {
    const r = await startReceiver();
    try {
      const endpoint = await svc.webhookEndpoints.create({ url: r.url, events: ["allowance.threshold"] });
      await svc.plans.create({ slug: "metered", name: "Metered", allowance: { unit: "runs", limit: null }, spendCeilingMicros: 10_000, alertThresholds: [50, 90] });
      await svc.plans.create({ slug: "quiet", name: "Quiet", allowance: { unit: "runs", limit: null }, spendCeilingMicros: 10_000, alertThresholds: [] });
      await svc.users.setPlan("thr-eve", "metered");
      await svc.users.setPlan("thr-fay", "quiet");
      const served = (costMicros: number) => async () => ({ output: "y", usage: { inputTokens: 1, outputTokens: 1, costMicros } });
      for (const user of ["thr-eve", "thr-fay"]) {
        await svc.runs.create({ user, prompt: "x", route: { prefer: ["app"] }, serveInApp: served(4000) }).result();
        await svc.runs.create({ user, prompt: "x", route: { prefer: ["app"] }, serveInApp: served(2000) }).result();
      }
      await r.waitFor(1);
      await new Promise((x) => setTimeout(x, 500));
      const got = r.received.map((x) => verified(endpoint.secret, x));
      // 6,000 of 10,000 micros: 50 % reached (once), 90 % not; the quiet plan sends nothing.
      expect(got.map((p) => [p.data.user, p.data.measure, p.data.threshold])).toEqual([["thr-eve", "spend", 50]]);
      expect(got[0].data.allowance).toMatchObject({ limit: null, spend: { usedMicros: 6000, ceilingMicros: 10_000, remainingMicros: 4000, reached: false } });
      await expectError(await post("/v1/plans", { slug: "bad", name: "Bad", alertThresholds: [80, 80] }), 400, "invalid_request");
      await expectError(await post("/v1/plans", { slug: "bad", name: "Bad", alertThresholds: [0] }), 400, "invalid_request");
    } finally {
      await r.close();
    }
  });
});

/**
 * Across two instances on one Postgres: a run paused on one instance, that instance
 * gone, the other takes the run over still paused (no second `run_paused`), and the
 * budget raised through it resumes the run there.
 */
onPostgres("a paused run across instances on postgres", (postgres) => {
  let a: TestServer;
  let b: TestServer;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    const made = await postgres.create();
    drop = made.drop;
    const env = { RUN_LEASE_SECONDS: "1", SVC_SEALING_KEY: randomBytes(32).toString("base64") };
    a = await startTestServer(made.target, env, { runningClock: true });
    b = await startTestServer(made.target, env, { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    await a?.close().catch(() => {});
    await b?.close();
    await drop?.();
  });

  it("is taken over paused by the other instance: one raised while no instance drove it resumes at the takeover, one raised after resumes there", async () => {
    const svcA = new Svc({ apiKey: a.dev.appKey, baseUrl: `${a.url}/v1` });
    const svcB = new Svc({ apiKey: a.dev.appKey, baseUrl: `${b.url}/v1` });
    const start = () => svcA.runs.create({ user: "bud-dave", model: "svc/echo", prompt: TWO_TURNS, tools: [weather], budget: { maxTokens: 1 } }).runId;
    const [early, late] = [await start(), await start()];
    for (const id of [early, late]) await pollUntil(() => svcB.runs.get(id), (r) => r.status === "paused", 10_000, "paused on a");
    const owner = async (id: string) => (await b.db.query<{ o: string | null }>(`SELECT lease_owner AS o FROM runs WHERE id = $1`, [id]))[0].o;
    const first = await owner(late);
    await a.close();
    // Raised at once, while its lease (1 s) still names the instance that is gone: nobody hears the wake.
    await svcB.runs.raiseBudget(early, { maxTokens: 10_000 });
    await pollUntil(() => owner(late), (o) => o !== null && o !== first, 15_000, "b took the run over");
    expect((await svcB.runs.get(late)).status).toBe("paused");
    await svcB.runs.raiseBudget(late, { maxTokens: 10_000 });
    for (const id of [early, late]) {
      const done = await pollUntil(() => svcB.runs.get(id), (r) => r.status === "completed", 15_000, "completed on b");
      expect(done).toMatchObject({ turns: 2, output: "It is sunny.", pausedAt: null });
      const kinds = (await b.db.query<{ kind: string }>(`SELECT kind FROM run_events WHERE run_id = $1 ORDER BY seq`, [id])).map((r) => r.kind);
      expect(kinds.filter((k) => k === "run_paused")).toHaveLength(1);
      expect(kinds.filter((k) => k === "run_resumed")).toHaveLength(1);
      const seqs = await seqsOf(b, id);
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    }
  });
});
