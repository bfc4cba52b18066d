import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { migratedTempDir } from "../helpers/migrated-folder.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { EmbeddedUpkeep } from "../../server/db/upkeep.js";
import type { Sql } from "../../server/db/open.js";
import { createLogger } from "../../server/logger.js";
import { Writable } from "node:stream";

/**
 * PGlite runs no autovacuum, so without the server's own upkeep its tables never have
 * statistics: the planner then reads a run by the app's index of runs by date (the
 * foreign-key check of every row naming a run did, reading all of the app's runs each
 * time). Postgres's autovacuum does the same there; the upkeep is PGlite's only.
 */

const quiet = createLogger("silent", new Writable({ write: (_c, _e, cb) => cb() }));

/** Which index the foreign-key check of a row naming a run reads (the check's own query, planned as a kept plan is: generic). */
async function keyCheckIndex(sql: Sql, runId: string, appId: string): Promise<string> {
  await sql.query(`SET plan_cache_mode = force_generic_plan`);
  try {
    const plan = await sql.query<{ "QUERY PLAN": string }>(
      `EXPLAIN (COSTS OFF) SELECT 1 FROM ONLY runs x WHERE id = $1 AND app_id = $2 AND environment = $3::"Environment" FOR KEY SHARE OF x`,
      [runId, appId, "test"],
    );
    return /Index Scan using (\S+)/.exec(plan.map((r) => r["QUERY PLAN"]).join("\n"))?.[1] ?? "(no index)";
  } finally {
    await sql.query(`RESET plan_cache_mode`);
  }
}

/** A table's counters, flushed first (a backend reports them at most once a second otherwise). */
async function counters(sql: Sql, table: string) {
  await sql.query(`SELECT pg_stat_force_next_flush()`);
  const [row] = await sql.query<{ analyzed: boolean; vacuums: string; modified: string; dead: string }>(
    `SELECT last_analyze IS NOT NULL AS analyzed, vacuum_count::text AS vacuums, n_mod_since_analyze::text AS modified, n_dead_tup::text AS dead
       FROM pg_stat_user_tables WHERE relname = $1`,
    [table],
  );
  return { analyzed: row.analyzed, vacuums: Number(row.vacuums), modified: Number(row.modified), dead: Number(row.dead) };
}

/** `n` finished runs of the dev app's user `user`. */
async function manyRuns(server: TestServer, user: string, n: number): Promise<void> {
  const endUserId = await ensureEndUser(server.db, { appId: server.dev.appId, environment: "test" }, user);
  await server.db.query(
    `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, created_at, finished_at)
     SELECT 'run_' || $3 || '_' || g, $1, 'test', $2, 'runs', 'm', '{}', 'completed', now() - g * interval '1 second', now() FROM generate_series(1, $4::int) g`,
    [server.dev.appId, endUserId, user, n],
  );
}

describe("the embedded database's upkeep (what autovacuum does for Postgres)", () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
    await manyRuns(server, "upkept", 3000);
  }, 60_000);

  afterAll(async () => {
    await server?.close();
  });

  it("analyses a table never analysed, then again once its changes pass autovacuum's threshold, after which a run is found by its key", async () => {
    // The state the upkeep mends: 3,000 runs never analysed, and a run read through the app's index by date.
    expect(await counters(server.db, "runs")).toMatchObject({ analyzed: false });
    expect(await keyCheckIndex(server.db, "run_upkept_1", server.dev.appId)).toBe("runs_app_id_environment_created_at_idx");

    const upkeep = new EmbeddedUpkeep(server.db, quiet);
    expect((await upkeep.pass()).analyzed).toContain("runs");
    expect(await counters(server.db, "runs")).toMatchObject({ analyzed: true, modified: 0 });
    expect(await keyCheckIndex(server.db, "run_upkept_1", server.dev.appId)).toBe("runs_id_app_id_environment_key");

    // 100 more runs: under 50 + 10 % of 3,000, not analysed again; 400 in all, past it.
    await manyRuns(server, "more", 100);
    expect((await upkeep.pass()).analyzed).not.toContain("runs");
    expect(await counters(server.db, "runs")).toMatchObject({ modified: 100 });
    await manyRuns(server, "again", 300);
    expect((await upkeep.pass()).analyzed).toContain("runs");
    expect((await upkeep.pass()).analyzed).not.toContain("runs");
  });

  it("vacuums a table whose dead rows pass the threshold", async () => {
    const upkeep = new EmbeddedUpkeep(server.db, quiet);
    await upkeep.pass();
    // 3,000 updated rows: 3,000 dead versions.
    await server.db.query(`UPDATE runs SET model = 'm2' WHERE id LIKE 'run_upkept_%'`);
    const before = await counters(server.db, "runs");
    expect(before.dead).toBeGreaterThanOrEqual(3000);
    const pass = await upkeep.pass();
    expect(pass.vacuumed).toContain("runs");
    // Analysed in the same statement: every row changed.
    expect(pass.analyzed).toContain("runs");
    const after = await counters(server.db, "runs");
    expect(after.vacuums).toBe(before.vacuums + 1);
    expect(after.dead).toBe(0);
  });
});

describe("the server keeps its embedded database's statistics", () => {
  const dir = migratedTempDir("svc-upkeep-");
  const target = { kind: "pglite" as const, dataDir: path.join(dir, "pglite") };

  it("a start on a data folder analyses what changed before it (and keeps doing so while it runs)", async () => {
    const first = await startTestServer(target);
    const appId = first.dev.appId;
    try {
      await manyRuns(first, "restarted", 2000);
      // The first start's pass came before these runs: they are not analysed yet.
      expect(await counters(first.db, "runs")).toMatchObject({ analyzed: false });
    } finally {
      await first.close();
    }
    const second = await startTestServer(target);
    try {
      const deadline = Date.now() + 20_000;
      while (!(await counters(second.db, "runs")).analyzed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(await counters(second.db, "runs")).toMatchObject({ analyzed: true });
      expect(await keyCheckIndex(second.db, "run_restarted_1", appId)).toBe("runs_id_app_id_environment_key");
    } finally {
      await second.close();
    }
  }, 120_000);
});
