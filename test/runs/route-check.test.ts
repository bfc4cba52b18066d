import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { openDatabase, type Database } from "../../server/db/open.js";
import { startRun, startRuns, type RouteCheck, type StartRunArgs, type StartRunOutcome } from "../../server/ledger/functions.js";
import { randomId } from "../../server/crypto.js";

/**
 * A run's start is one statement (`svc_start_run`) that also checks the route it
 * is given: a machine removed (on any instance) is never taken, whichever way the
 * route was chosen; a route chosen in memory on the instance holding the machine
 * (`routedHere`) holds only while the user has no machine held elsewhere, the one
 * chosen is held there, and its runtime's slots are as that instance saw them.
 * Each refusal is a `reroute` that writes nothing; each has a start beside it
 * that goes through (the positive control).
 */
onEachDatabase("svc_start_run checks the route it is given", (database) => {
  let db: Database;
  let drop: () => Promise<void>;
  const app = "app_route_check";
  const now = new Date();

  beforeAll(async () => {
    const made = await database.create({ migrated: true });
    drop = made.drop;
    db = await openDatabase(made.target);
    await db.query(`INSERT INTO apps (id, name) VALUES ($1, 'Route check')`, [app]);
  });
  afterAll(async () => {
    await db?.close();
    await drop?.();
  });

  /** A user with machines: each held by an instance (or none), removed or not, with one runtime `ollama` capped at `cap`. */
  async function userWith(machines: { instance: string | null; removed?: boolean; cap?: number | null; active?: number }[]): Promise<{ user: string; machineIds: string[] }> {
    const user = randomId("eu_", 12);
    await db.query(`INSERT INTO end_users (id, app_id, environment, external_id) VALUES ($1, $2, 'test', $1)`, [user, app]);
    const machineIds: string[] = [];
    for (const m of machines) {
      const id = randomId("mach_", 12);
      machineIds.push(id);
      await db.query(
        `INSERT INTO machines (id, app_id, environment, end_user_id, token_hash, hostname, platform, arch, client, revoked_at, connected_instance, connected_at)
         VALUES ($1, $2, 'test', $3, $1, 'host', 'linux', 'x64', 'svc-worker', $4, $5, $6)`,
        [id, app, user, m.removed ? now : null, m.instance, m.instance ? now : null],
      );
      await db.query(
        `INSERT INTO runtimes (id, app_id, environment, machine_id, name, kind, cost_class, models, max_concurrent_jobs) VALUES ($1, $2, 'test', $3, 'ollama', 'model', 'user_hardware', '["llama3"]', $4)`,
        [randomId("rt_", 12), app, id, m.cap ?? null],
      );
      for (let i = 0; i < (m.active ?? 0); i++) {
        await db.query(
          `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, route_kind, machine_id, runtime_name) VALUES ($1, $2, 'test', $3, 'runs', 'llama3', '{}', 'running', 'user-hardware', $4, 'ollama')`,
          [randomId("run_", 12), app, user, id],
        );
      }
    }
    return { user, machineIds };
  }

  const startArgs = (user: string, machineId: string, routedHere?: RouteCheck, runId = randomId("run_", 24)): StartRunArgs => ({
    runId, appId: app, environment: "test", endUserId: user, source: "runs", model: "llama3", request: { prompt: "hi" }, requestHash: null, repeatSince: now,
    status: "queued", routeKind: "user-hardware", machineId, runtime: "ollama", leaseOwner: routedHere?.instance ?? null, leaseExpiresAt: routedHere ? new Date(now.getTime() + 30_000) : null,
    now, costClass: "user_hardware", period: now.toISOString().slice(0, 7), routedHere,
  });

  async function start(user: string, machineId: string, routedHere?: RouteCheck): Promise<{ outcome: StartRunOutcome; written: number }> {
    const runId = randomId("run_", 24);
    const outcome = await startRun(db, startArgs(user, machineId, routedHere, runId));
    const [{ n }] = await db.query<{ n: number }>(`SELECT (SELECT count(*) FROM runs WHERE id = $1) + (SELECT count(*) FROM usage_rows WHERE run_id = $1) AS n`, [runId]);
    return { outcome, written: Number(n) };
  }

  const here = (over: Partial<RouteCheck> = {}): RouteCheck => ({ instance: "inst_a", cap: null, expectFree: true, queueBound: 100, ...over });

  it("a machine removed is refused whichever way the route was chosen; one not removed starts (its run and its ledger row written)", async () => {
    const { user, machineIds: [removed, kept] } = await userWith([{ instance: "inst_a", removed: true }, { instance: "inst_a" }]);
    for (const check of [undefined, here()]) {
      const refused = await start(user, removed, check);
      expect(refused.outcome).toMatchObject({ outcome: "reroute", run_status: "machine_removed" });
      expect(refused.written).toBe(0);
    }
    const ok = await start(user, kept, here());
    expect(ok.outcome.outcome).toBe("started");
    expect(ok.written).toBe(2);
  });

  it("a machine of another user is refused as removed: a run never reaches compute its user does not own", async () => {
    const { machineIds: [theirs] } = await userWith([{ instance: "inst_a" }]);
    const { user } = await userWith([{ instance: "inst_a" }]);
    expect((await start(user, theirs)).outcome).toMatchObject({ outcome: "reroute", run_status: "machine_removed" });
    expect((await start(user, theirs, here())).written).toBe(0);
  });

  it("routed in memory: refused when the user has a machine held by another instance, or the one chosen is not held here; taken when it is all here", async () => {
    const { user, machineIds: [mine] } = await userWith([{ instance: "inst_a" }, { instance: "inst_b" }]);
    expect((await start(user, mine, here())).outcome).toMatchObject({ outcome: "reroute", run_status: "machines_elsewhere" });
    // The same route chosen from the rows (no memory to doubt) starts.
    expect((await start(user, mine)).outcome.outcome).toBe("started");

    const alone = await userWith([{ instance: "inst_b" }, { instance: null }]);
    expect((await start(alone.user, alone.machineIds[0], here())).outcome).toMatchObject({ outcome: "reroute", run_status: "machines_elsewhere" });
    expect((await start(alone.user, alone.machineIds[0], here({ instance: "inst_b" }))).outcome.outcome).toBe("started");
  });

  it("routed in memory: a slot seen free but taken meanwhile, or a queue seen with room but full, is refused; as seen, it starts", async () => {
    const { user, machineIds: [full] } = await userWith([{ instance: "inst_a", cap: 2, active: 2 }]);
    expect((await start(user, full, here({ cap: 2, expectFree: true }))).outcome).toMatchObject({ outcome: "reroute", run_status: "slots_changed" });
    // Waiting for a slot, its machine's queue (runs past the caps: none yet, then one) below the bound of 1: taken once, then refused.
    expect((await start(user, full, here({ cap: 2, expectFree: false, queueBound: 1 }))).outcome.outcome).toBe("started");
    const queueFull = await start(user, full, here({ cap: 2, expectFree: false, queueBound: 1 }));
    expect(queueFull.outcome).toMatchObject({ outcome: "reroute", run_status: "slots_changed" });
    expect(queueFull.written).toBe(0);

    const { user: other, machineIds: [roomy] } = await userWith([{ instance: "inst_a", cap: 2, active: 1 }]);
    expect((await start(other, roomy, here({ cap: 2, expectFree: true }))).outcome.outcome).toBe("started");
  });

  it("a batch of starts counts a runtime's slots once and adds each start it makes: the starts past the cap are refused, as one by one; a run ended meanwhile is counted by the next batch", async () => {
    const { user, machineIds: [m] } = await userWith([{ instance: "inst_a", cap: 5, active: 2 }]);
    // One start routed from the rows in the middle (no check of its own): its run takes a slot all the same.
    const batch = [here({ cap: 5 }), here({ cap: 5 }), undefined, here({ cap: 5 }), here({ cap: 5 })].map((check) => startArgs(user, m, check));
    const outcomes = await startRuns(db, batch);
    expect(outcomes.map((o) => (o.outcome === "reroute" ? o.run_status : o.outcome))).toEqual(["started", "started", "started", "slots_changed", "slots_changed"]);
    const [{ n }] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM runs WHERE machine_id = $1 AND status IN ('queued', 'running')`, [m]);
    expect(n).toBe(5);
    // The same starts one by one decide the same (the control).
    const { user: alone, machineIds: [m2] } = await userWith([{ instance: "inst_a", cap: 5, active: 2 }]);
    const oneByOne: string[] = [];
    for (const check of [here({ cap: 5 }), here({ cap: 5 }), undefined, here({ cap: 5 }), here({ cap: 5 })]) {
      const o = (await start(alone, m2, check)).outcome;
      oneByOne.push(o.outcome === "reroute" ? o.run_status! : o.outcome);
    }
    expect(oneByOne).toEqual(["started", "started", "started", "slots_changed", "slots_changed"]);
    // Two runs end; the next batch counts again and takes their two slots.
    await db.query(`UPDATE runs SET status = 'completed' WHERE id IN (SELECT id FROM runs WHERE machine_id = $1 AND status = 'running' LIMIT 2)`, [m]);
    const next = await startRuns(db, [1, 2, 3].map(() => startArgs(user, m, here({ cap: 5 }))));
    expect(next.map((o) => (o.outcome === "reroute" ? o.run_status : o.outcome))).toEqual(["started", "started", "slots_changed"]);
  });
});
