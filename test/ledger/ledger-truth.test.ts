import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { workerMessage } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { apiClient } from "../helpers/api.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { answerNothing, connectWorkerDouble, type WorkerDouble } from "../helpers/raw-worker.js";

/**
 * The ledger's truth (issue 14): the cost class of every row is the service's
 * decision (the route and the runtime's kind), never what a machine advertises;
 * and overage on a tokens plan is priced under the user's row lock, so turns of
 * one user's runs written at the same moment are priced as if written one after
 * another. A test double speaking the real worker protocol plays the machine.
 */

/** A job's end, as the machine reports it, with the token counts it claims. */
const done = (w: WorkerDouble, jobId: string, inputTokens: number, outputTokens: number) =>
  w.send(workerMessage("job_event", { jobId, event: { type: "done", finishReason: "stop", output: "ok", usage: { inputTokens, outputTokens } } }));

interface UsageRow {
  id: string;
  runId: string | null;
  costClass: string;
  kind: string;
  inputTokens: number;
  outputTokens: number;
  amountMicros: number;
}

onEachDatabase("the ledger's truth on $db.name", (db) => {
  let server: TestServer;
  let api: ReturnType<typeof apiClient>;
  const workers: WorkerDouble[] = [];

  beforeAll(async () => {
    server = await startTestServerOn(db);
    api = apiClient(server, server.dev.appKey);
  }, 60_000);
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.close();
  });
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  const usage = async (user: string): Promise<UsageRow[]> => {
    const res = await api<{ data: UsageRow[] }>("GET", `/v1/usage?user=${user}&limit=200`);
    expect(res.status).toBe(200);
    return res.body.data;
  };

  /** POST /v1/runs, its event stream read to the end (in the background until awaited). */
  const startRun = (body: Record<string, unknown>) =>
    server
      .fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json" }, body: JSON.stringify(body) })
      .then(async (res) => ({ status: res.status, runId: res.headers.get("service-run-id"), text: await res.text() }));

  it("a machine advertising wrong cost classes changes nothing: every row, event and read carries the service's class", async () => {
    const user = "liar";
    const m = await pairViaApi(server, server.dev, user);
    // A model runtime claiming to be free, an agent CLI claiming to be the user's hardware.
    const w = await connectWorkerDouble(server.url, m.token, answerNothing, [
      { name: "ollama", kind: "model", costClass: "free", models: ["m1"] },
      { name: "codex", kind: "agent", costClass: "user_hardware", models: [] },
    ]);
    workers.push(w);

    const model = startRun({ user, model: "ollama/m1", prompt: "hi", route: { prefer: ["user-hardware"] } });
    const [modelJob] = await w.waitJobs(1);
    expect(modelJob.job.kind).toBe("model_turn");
    done(w, modelJob.jobId, 11, 7);
    const modelRun = await model;
    expect(modelRun.status).toBe(200);
    expect(modelRun.text).toMatch(/event: run_started\ndata: .*"costClass":"user_hardware"/);
    expect(modelRun.text).toMatch(/event: usage\ndata: .*"costClass":"user_hardware"/);
    expect(modelRun.text).toMatch(/event: run_completed\ndata: .*"costClass":"user_hardware"/);

    const agent = startRun({ user, model: "codex", prompt: "fix it", route: { prefer: ["user-subscription"] } });
    const [, agentJob] = await w.waitJobs(2);
    expect(agentJob.job.kind).toBe("agent_run");
    done(w, agentJob.jobId, 5, 3);
    const agentRun = await agent;
    expect(agentRun.text).toMatch(/event: run_started\ndata: .*"costClass":"user_subscription"/);

    // A handback and an echo, for the two classes no machine is involved in.
    const handback = await api("POST", "/v1/runs", { user, model: "auto", prompt: "hi", route: { prefer: ["app"] } });
    expect(handback.status).toBe(409);
    const handbackId = handback.headers.get("service-run-id")!;
    expect((await api("POST", `/v1/runs/${handbackId}/usage`, { inputTokens: 2, outputTokens: 2 })).body.costClass).toBe("app_served");
    expect((await api("POST", "/v1/chat/completions", { model: "svc/echo", user, messages: [{ role: "user", content: "echo" }] })).status).toBe(200);

    const rows = await usage(user);
    const byRun = (id: string | null) => rows.filter((r) => r.runId === id).map((r) => [r.kind, r.costClass]);
    expect(byRun(modelRun.runId)).toEqual([
      ["run", "user_hardware"],
      ["tokens", "user_hardware"],
    ]);
    expect(byRun(agentRun.runId)).toEqual([
      ["run", "user_subscription"],
      ["tokens", "user_subscription"],
    ]);
    expect(byRun(handbackId)).toEqual([
      ["run", "app_served"],
      ["app_usage", "app_served"],
    ]);
    expect(rows.filter((r) => r.kind === "echo").map((r) => r.costClass)).toEqual(["free"]);
    // Nothing the machine said reached the ledger.
    expect(rows.filter((r) => r.kind !== "echo" && r.costClass === "free")).toEqual([]);

    // The reads say the same: the run, and the compute read (the service's class, not the advertised one).
    expect((await api("GET", `/v1/runs/${modelRun.runId}`)).body.costClass).toBe("user_hardware");
    expect((await api("GET", `/v1/runs/${agentRun.runId}`)).body.costClass).toBe("user_subscription");
    const compute = await api("GET", `/v1/users/${user}/compute`);
    expect(compute.status).toBe(200);
    const runtimes = compute.body.machines
      .flatMap((x: { runtimes: { name: string; costClass: string }[] }) => x.runtimes)
      .map((r: { name: string; costClass: string }) => [r.name, r.costClass])
      .sort();
    expect(runtimes).toEqual([
      ["codex", "user_subscription"],
      ["ollama", "user_hardware"],
    ]);
    const stored = await server.db.prisma.runtime.findMany({ where: { machineId: m.machineId }, orderBy: { name: "asc" } });
    expect(stored.map((r) => [r.name, r.costClass])).toEqual([
      ["codex", "user_subscription"],
      ["ollama", "user_hardware"],
    ]);
  });

  /**
   * Overage on a tokens plan priced under the user's row lock: many turns of one
   * user's runs (on the user's machine, and reported by the app after handbacks)
   * written at the same moment are priced exactly as one after another would be.
   * On PGlite (one connection) the writes are serial anyway; on Postgres they race.
   */
  it("concurrent token rows of one user price overage from a total that counts each other (no under-billing)", async () => {
    const user = "racer";
    const allowance = 120;
    const price = 1_500; // micros per 1,000 tokens: 1.5 µ a token, so rounding per row shows too
    expect((await api("POST", "/v1/plans", { slug: "racemeter", name: "Race meter", allowance: { unit: "tokens", limit: allowance }, overage: true, overagePriceMicros: price })).status).toBe(201);
    expect((await api("PUT", `/v1/users/${user}/plan`, { plan: "racemeter" })).status).toBe(200);
    const m = await pairViaApi(server, server.dev, user, {}, "race-machine");
    const w = await connectWorkerDouble(server.url, m.token, answerNothing, [{ name: "ollama", kind: "model", costClass: "user_hardware", models: ["m1"] }]);
    workers.push(w);

    const RUNS = 10;
    const HANDBACKS = 4;
    const handbacks: string[] = [];
    for (let i = 0; i < HANDBACKS; i++) {
      const r = await api("POST", "/v1/runs", { user, model: "auto", prompt: `hb ${i}`, route: { prefer: ["app"] } });
      expect(r.status).toBe(409);
      handbacks.push(r.headers.get("service-run-id")!);
    }
    const runs = Array.from({ length: RUNS }, (_, i) => startRun({ user, model: "ollama/m1", prompt: `run ${i}`, route: { prefer: ["user-hardware"] } }));
    const jobs = await w.waitJobs(RUNS);
    // Every turn's tokens arrive at once, and the app reports its handbacks' usage at the same moment.
    for (const [i, j] of jobs.entries()) done(w, j.jobId, 20 + i, 13);
    const reports = handbacks.map((id, i) => api("POST", `/v1/runs/${id}/usage`, { inputTokens: 30 + i, outputTokens: 7 }));
    for (const r of await Promise.all(reports)) expect(r.status).toBe(200);
    for (const r of await Promise.all(runs)) expect(r.text).toContain("event: run_completed");

    const rows = (await usage(user)).filter((r) => r.kind === "tokens" || r.kind === "app_usage");
    expect(rows).toHaveLength(RUNS + HANDBACKS);
    // The serial computation: in the order the rows were written (ids), each priced on the total before it.
    let used = 0;
    let expectedTotal = 0;
    const expected = rows.map((r) => {
      const t = r.inputTokens + r.outputTokens;
      const over = Math.max(0, Math.min(t, used + t - allowance));
      used += t;
      const amount = Math.floor((over * price) / 1000);
      expectedTotal += amount;
      return { id: r.id, amountMicros: amount };
    });
    expect(rows.map((r) => ({ id: r.id, amountMicros: r.amountMicros }))).toEqual(expected);
    const total = rows.reduce((s, r) => s + r.amountMicros, 0);
    expect(total).toBe(expectedTotal);
    // The whole overage: every token past the allowance is priced (1.5 µ each, rounded down per row).
    expect(used - allowance).toBeGreaterThan(300);
    expect(total).toBeGreaterThanOrEqual(Math.floor(((used - allowance) * price) / 1000) - rows.length);
  });
});
