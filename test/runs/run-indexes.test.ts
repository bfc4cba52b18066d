import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { ACTIVE_STATUSES_SQL } from "../../server/runs/run-rows.js";
import { ACTIVE_RUNS_COUNT_SQL } from "../../server/metrics/metrics.js";

/**
 * Three indexes of `runs` are partial (migration `runs_partial_indexes`): the lease sweeps' index holds active
 * runs only, the repeat check's only runs with a request hash, the run bus's compaction sweep's only runs whose
 * events are on the bus. Finished runs, runs started with POST /v1/runs and runs without the bus cost them no
 * entry, and the queries they serve still read them (a predicate they no longer imply would turn each sweep into
 * a scan of every run ever made).
 */
onEachDatabase("runs' partial indexes on $db.name", (db) => {
  let server: TestServer;
  let appId: string;

  beforeAll(async () => {
    server = await startTestServerOn(db);
    appId = server.dev.appId;
    const endUserId = await ensureEndUser(server.db, { appId, environment: "test" }, "indexed");
    // 3,000 finished runs (a history), 20 active ones with their leases, 5 chat completions with a request hash, 3 on the run bus.
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, created_at, finished_at)
       SELECT 'run_done_' || g, $1, 'test', $2, 'runs', 'm', '{}', 'completed', now() - interval '1 day', now() - interval '1 day' FROM generate_series(1, 3000) g`,
      [appId, endUserId],
    );
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, lease_owner, lease_expires_at, created_at)
       SELECT 'run_live_' || g, $1, 'test', $2, 'runs', 'm', '{}', 'running', 'elsewhere', now() + interval '1 minute', now() FROM generate_series(1, 20) g`,
      [appId, endUserId],
    );
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, request_hash, status, created_at, finished_at)
       SELECT 'run_chat_' || g, $1, 'test', $2, 'chat', 'm', '{}', 'hash_' || g, 'completed', now(), now() FROM generate_series(1, 5) g`,
      [appId, endUserId],
    );
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, events_in_stream, created_at, finished_at)
       SELECT 'run_bus_' || g, $1, 'test', $2, 'runs', 'm', '{}', 'completed', true, now(), now() - interval '1 minute' FROM generate_series(1, 3) g`,
      [appId, endUserId],
    );
    await server.db.query(`ANALYZE runs`);
  }, 60_000);

  afterAll(async () => {
    await server?.close();
  });

  const size = async (index: string) => Number((await server.db.query<{ n: string }>(`SELECT pg_relation_size($1::regclass)::text AS n`, [index]))[0].n);

  /** The plan of `sql` with sequential scans priced out, on one connection (the setting is the session's). */
  const plan = (sql: string, params: unknown[] = []) =>
    server.db.exclusive(0x1dce5, async (session) => {
      await session.query(`SET enable_seqscan = off`);
      try {
        return (await session.query<{ "QUERY PLAN": string }>(`EXPLAIN (COSTS OFF) ${sql}`, params)).map((r) => r["QUERY PLAN"]).join("\n");
      } finally {
        await session.query(`RESET enable_seqscan`);
      }
    });

  it("finished runs, runs without a request hash and runs off the bus take no entry in them; an index of every run grows with the history (the control)", async () => {
    const everyRun = await size("runs_app_id_environment_created_at_idx");
    expect(everyRun).toBeGreaterThan(40_000);
    for (const partial of ["runs_status_lease_expires_at_idx", "runs_app_id_environment_request_hash_created_at_idx", "runs_events_in_stream_finished_at_idx"]) {
      expect(await size(partial), partial).toBeLessThanOrEqual(16_384);
    }
  });

  it("the lease sweeps, the repeat check and the compaction sweep read them; a query for finished runs cannot (the control)", async () => {
    const sweep = await plan(`SELECT id FROM runs WHERE status IN (${ACTIVE_STATUSES_SQL}) AND lease_expires_at < now()`);
    expect(sweep).toContain("runs_status_lease_expires_at_idx");
    const repeat = await plan(`SELECT id FROM runs WHERE app_id = $1 AND environment = 'test' AND request_hash = $2 AND created_at > now() - interval '1 hour'`, [appId, "hash_3"]);
    expect(repeat).toContain("runs_app_id_environment_request_hash_created_at_idx");
    const compaction = await plan(`SELECT id FROM runs WHERE events_in_stream AND finished_at < now() ORDER BY finished_at LIMIT 10`);
    expect(compaction).toContain("runs_events_in_stream_finished_at_idx");
    // The metrics' count of active runs at each scrape (svc_runs): through the same index, not every run ever made.
    expect(await plan(ACTIVE_RUNS_COUNT_SQL)).toContain("runs_status_lease_expires_at_idx");
    const finished = await plan(`SELECT id FROM runs WHERE status = 'completed' AND lease_expires_at IS NULL`);
    expect(finished).not.toContain("runs_status_lease_expires_at_idx");
  });

  it("the sweeps find what they look for through them, and the metrics count the active runs only", async () => {
    const counted = await server.db.query<{ status: string; route_kind: string; n: number }>(ACTIVE_RUNS_COUNT_SQL);
    expect(counted).toEqual([{ status: "running", route_kind: "none", n: 20 }]);
    const live = await server.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM runs WHERE status IN (${ACTIVE_STATUSES_SQL}) AND lease_expires_at > now()`);
    expect(live[0].n).toBe(20);
    const chat = await server.db.query<{ id: string }>(`SELECT id FROM runs WHERE app_id = $1 AND environment = 'test' AND request_hash = 'hash_3'`, [appId]);
    expect(chat.map((r) => r.id)).toEqual(["run_chat_3"]);
    const bus = await server.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM runs WHERE events_in_stream AND finished_at < now()`);
    expect(bus[0].n).toBe(3);
  });
});
