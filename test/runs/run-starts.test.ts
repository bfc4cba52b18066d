import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase, onPostgres } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { watchingStatements } from "../helpers/statements.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { randomId } from "../../server/crypto.js";
import { RunStarts } from "../../server/runs/run-starts.js";
import { costClassOf, periodOf } from "../../server/ledger/metering.js";
import { startRun, type StartRunArgs } from "../../server/ledger/functions.js";

/** A start of a run handed back to the app (route `app`: no machine), in the test environment; counted against the plan like any start. */
function handedBack(appId: string, endUserId: string, runId: string, now = new Date()): StartRunArgs {
  return {
    runId, appId, environment: "test", endUserId, source: "runs", model: "m", request: { prompt: "p" }, requestHash: null, repeatSince: now,
    status: "handed_back", routeKind: "app", machineId: null, runtime: null, leaseOwner: null, leaseExpiresAt: null, now, costClass: costClassOf("app"), period: periodOf(now),
  };
}

/**
 * Runs' starts by group commit (`RunStarts`, `svc_start_runs`): a burst of starts is a few
 * statements, each start decided as it would be alone and in the order it came (the plan's
 * allowance never passed, each counted start numbered once); on Postgres a statement carries one
 * user's starts; a start that fails fails only its own caller.
 */
onEachDatabase("runs' starts grouped on $db.name", (db) => {
  let server: TestServer;
  const api = (method: string, path: string, body: unknown) =>
    server.fetch(path, { method, headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, body: JSON.stringify(body) });

  /** Counts the start statements while `fn` runs, with the users each one carried. */
  async function counting<T>(fn: () => Promise<T>): Promise<{ result: T; single: number; grouped: string[][] }> {
    let single = 0;
    const grouped: string[][] = [];
    const result = await watchingStatements(server.db, (text, params) => {
      if (text.includes("svc_start_run(")) single++;
      if (text.includes("svc_start_runs(")) grouped.push((JSON.parse(String(params![0])) as { p_user: string }[]).map((s) => s.p_user));
    }, fn);
    return { result, single, grouped };
  }

  beforeAll(async () => {
    server = await startTestServerOn(db);
    expect((await api("POST", "/v1/plans", { slug: "starts-12", name: "Twelve runs", allowance: { unit: "runs", limit: 12 } })).status).toBe(201);
    for (const user of ["burst-a", "burst-b", "burst-direct"]) expect((await api("PUT", `/v1/users/${user}/plan`, { plan: "starts-12" })).status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  it("30 starts at once of each of two users with 12 runs allowed: 12 counted each, 18 refused; on Postgres fewer statements than starts, each one user's", async () => {
    const { result, single, grouped } = await counting(() =>
      Promise.all(["burst-a", "burst-b"].flatMap((user) => Array.from({ length: 30 }, () => api("POST", "/v1/runs", { user, prompt: "go", route: { prefer: ["app"] } }).then(async (r) => ({ user, status: r.status, code: ((await r.json()) as { error?: { code?: string } }).error?.code }))))),
    );
    for (const user of ["burst-a", "burst-b"]) {
      const mine = result.filter((r) => r.user === user);
      // Handed back and counted (409 serve_in_app): the allowance's 12; the rest refused before anything was counted.
      expect(mine.filter((r) => r.status === 409 && r.code === "serve_in_app")).toHaveLength(12);
      expect(mine.filter((r) => r.status === 402 && r.code === "allowance_exhausted")).toHaveLength(18);
      const counted = await server.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id WHERE e.external_id = $1 AND u.kind = 'run'`,
        [user],
      );
      expect(counted[0].n).toBe(12);
    }
    expect(grouped.flat().length + single).toBe(60);
    // On Postgres each start's statements before it are on connections of their own, so the starts
    // waiting on one user's row gather: a few statements, each with one user's starts. (On PGlite the
    // route's read before each start queues on the one connection in arrival order, so HTTP starts
    // interleave with those reads; the next test groups starts on both databases.)
    if (db.name === "postgres") {
      // How many gather depends on how the requests arrive (60 starts went in up to 25 statements in runs here).
      expect(grouped.length).toBeGreaterThan(0);
      expect(single + grouped.length).toBeLessThan(60);
      for (const users of grouped) expect(new Set(users).size).toBe(1);
    }
  });

  const tenant = () => ({ appId: server.dev.appId, environment: "test" as const });
  const args = (runId: string, endUserId: string) => handedBack(tenant().appId, endUserId, runId);

  it("30 starts of one user made together are one statement, decided in the order made: the first 12 counted (their counts 1 to 12), the rest refused at 12", async () => {
    const endUserId = await ensureEndUser(server.db, tenant(), "burst-direct");
    const starts = new RunStarts(server.db);
    const ids = Array.from({ length: 30 }, () => randomId("run_", 24));
    const { result, grouped, single } = await counting(() => Promise.all(ids.map((id) => starts.start(args(id, endUserId)))));
    expect(grouped).toEqual([Array(30).fill(endUserId)]);
    expect(single).toBe(0);
    expect(result.map((r) => [r.outcome, Number(r.consumed)])).toEqual(ids.map((_, i) => (i < 12 ? ["started", i + 1] : ["allowance_exhausted", 12])));
    expect(result.slice(0, 12).map((r) => r.run_id)).toEqual(ids.slice(0, 12));
    const runs = await server.db.query<{ id: string }>(`SELECT id FROM runs WHERE id = ANY($1::text[]) ORDER BY id`, [ids]);
    expect(runs.map((r) => r.id)).toEqual(ids.slice(0, 12).sort());
  });

  it("a start that fails in a group fails only its own caller; the others start, and their runs and ledger rows exist", async () => {
    const endUserId = await ensureEndUser(server.db, tenant(), "group-fallback");
    const ids = [randomId("run_", 24), randomId("run_", 24)];
    const starts = new RunStarts(server.db);
    // The second start reuses the first's run id: its insert breaks the key, and the group's statement fails whole.
    const { result, grouped, single } = await counting(() =>
      Promise.all([ids[0], ids[0], ids[1]].map((id) => starts.start(args(id, endUserId)).then((r) => r.outcome, (e: Error) => `error: ${e.message}`))),
    );
    expect(result[0]).toBe("started");
    expect(result[1]).toMatch(/^error: .*(duplicate|unique)/i);
    expect(result[2]).toBe("started");
    // One grouped statement, failed whole; then each start again alone.
    expect(grouped).toHaveLength(1);
    expect(single).toBe(3);
    const rows = await server.db.query<{ id: string; ledger: number }>(
      `SELECT r.id, (SELECT count(*)::int FROM usage_rows u WHERE u.run_id = r.id) AS ledger FROM runs r WHERE r.id = ANY($1::text[]) ORDER BY r.id`,
      [ids],
    );
    expect(rows).toEqual([...ids].sort().map((id) => ({ id, ledger: 1 })));
  });
});

/**
 * A start holds its user's row until it commits (`FOR NO KEY UPDATE`): the user's other starts wait for it,
 * but rows that only name the user (another run's ledger row, written by the run writer meanwhile) check
 * their key without waiting. With `FOR UPDATE` every ledger row of the user waited for the start batch
 * in flight (1,000 streams of one user: 6,027 key checks of 0.63 ms each, waiting).
 */
onPostgres("a start's lock on its user's row, on postgres", (db) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServerOn(db);
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  it("while a start is uncommitted, a ledger row naming the user is written at once; the user's next start waits for it (the control), then starts", { timeout: 30_000 }, async () => {
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    const endUserId = await ensureEndUser(server.db, tenant, "lock-mode");
    const now = new Date();
    const args = (runId: string) => handedBack(tenant.appId, endUserId, runId, now);
    const earlier = randomId("run_", 24);
    expect((await startRun(server.db, args(earlier))).outcome).toBe("started");
    const settledWithin = <T>(p: Promise<T>, ms: number) => Promise.race([p.then((v) => ({ done: true as const, v })), new Promise<{ done: false }>((r) => setTimeout(() => r({ done: false }), ms))]);
    const outcome = await server.db.exclusive(72_410_032, async (sql) => {
      await sql.exec("BEGIN");
      try {
        const held = randomId("run_", 24);
        const call = await sql.query<{ outcome: string }>(`SELECT outcome FROM svc_start_run($1, $2, 'test', $3, 'runs', 'm', '{}', NULL, now(), 'handed_back', 'app', NULL, NULL, NULL, NULL, now(), 'app_served', $4, NULL, NULL, NULL, NULL)`, [held, tenant.appId, endUserId, periodOf(now)]);
        expect(call[0].outcome).toBe("started");
        // The earlier run's usage, reported meanwhile: its ledger row names the user.
        const ledger = server.db.query(
          `INSERT INTO usage_rows (app_id, environment, end_user_id, run_id, cost_class, kind, amount_micros, period, unique_key, created_at) VALUES ($1, 'test', $2, $3, 'app_served', 'app_usage', 5, $4, $5, now())`,
          [tenant.appId, endUserId, earlier, periodOf(now), `usage:${earlier}`],
        );
        const next = startRun(server.db, args(randomId("run_", 24)));
        const ledgerWhileHeld = await settledWithin(ledger, 3_000);
        const nextWhileHeld = await settledWithin(next, 500);
        await sql.exec("COMMIT");
        return { ledgerWhileHeld: ledgerWhileHeld.done, nextWhileHeld: nextWhileHeld.done, next: (await next).outcome };
      } catch (err) {
        await sql.exec("ROLLBACK").catch(() => {});
        throw err;
      }
    });
    expect(outcome).toEqual({ ledgerWhileHeld: true, nextWhileHeld: false, next: "started" });
  });
});
