import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WebSocket } from "ws";
import { Svc, type RunEvent } from "@svc/sdk";
import { WORKER_CLOSE } from "@svc/contract";
import { postgresAdminUrl, postgresAvailable, withClient } from "../helpers/databases.js";
import { randomId } from "../../server/crypto.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { callFirstTool, closeRawWorkers, connectWorkerDouble, type JobAnswer } from "../helpers/raw-worker.js";
import { pgbouncerAvailable, startPgBouncer, type PgBouncer } from "../helpers/pgbouncer.js";

/**
 * Two instances whose pools go through a real PgBouncer in transaction mode
 * (DATABASE_URL), with a direct connection for LISTEN and the start's advisory
 * lock (DATABASE_DIRECT_URL). Postgres then sees the pooler's few server
 * connections plus one LISTEN connection per instance, however many instances
 * and pool slots there are; each statement may run on another server connection,
 * so none is a named prepared statement.
 */
// Skipped where PgBouncer is not installed, unless SVC_TEST_PGBOUNCER=1 (CI) asks for it: then its absence fails.
describe.skipIf(!postgresAvailable || (!pgbouncerAvailable && process.env.SVC_TEST_PGBOUNCER !== "1"))("instances through PgBouncer in transaction mode", () => {
  const POOL = 3;
  let bouncer: PgBouncer;
  let a: TestServer;
  let b: TestServer;
  let database: string;
  const open: WebSocket[] = [];

  beforeAll(async () => {
    bouncer = await startPgBouncer({ poolSize: POOL, upstream: postgresAdminUrl! });
    database = randomId("svc_test_", 12);
    await withClient(postgresAdminUrl!, (c) => c.query(`CREATE DATABASE ${database}`));
    const direct = new URL(postgresAdminUrl!);
    direct.pathname = `/${database}`;
    // Each instance may hold 8 connections to the pooler: more than the pooler holds to Postgres.
    const target = { kind: "postgres" as const, url: bouncer.through(direct.toString()), directUrl: direct.toString(), poolSize: 8 };
    // The first migrates through the direct connection (its advisory lock held there) and makes the dev app.
    a = await startTestServer(target, {}, { runningClock: true });
    b = await startTestServer(target, { SVC_DEV_APP: "" }, { runningClock: true });
  }, 120_000);
  afterAll(async () => {
    await closeRawWorkers(open);
    await a?.close();
    await b?.close();
    if (database) await withClient(postgresAdminUrl!, (c) => c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
    await bouncer?.stop();
    removeTempDirs();
  });

  /** A tool call in a run's first turn, its answer's text in the next. */
  const oneToolCall: JobAnswer = (job, n) => (job.kind === "model_turn" && job.messages.at(-1)?.role === "tool" ? callFirstTool("done")({ ...job, tools: [] }, n) : callFirstTool("done")(job, n));

  const connections = async () => {
    const rows = await withClient(postgresAdminUrl!, (c) =>
      c.query<{ listening: boolean }>(`SELECT query LIKE 'LISTEN %' AS listening FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, [database]),
    );
    return { all: rows.rows.length, listening: rows.rows.filter((r) => r.listening).length };
  };

  it("20 runs at once, started on B and served by a machine held on A, complete with their tool round trip; Postgres holds the pooler's connections and one LISTEN connection per instance", async () => {
    const m = await pairViaApi(a, a.dev, "pooled-user");
    const double = await connectWorkerDouble(a.url, m.token, oneToolCall, undefined, open);
    const svc = new Svc({ apiKey: a.dev.appKey, baseUrl: `${b.url}/v1` });
    // The SDK answers each tool call (posted to B, the run driven wherever it was claimed).
    const runs = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const run = svc.runs.create({ user: "pooled-user", prompt: `run ${i}`, tools: [{ name: "lookup", run: () => "42" }], route: { prefer: ["user-hardware"] } });
        const events: RunEvent[] = [];
        for await (const e of run) events.push(e);
        return events;
      }),
    );
    for (const events of runs) {
      expect(events.at(-1)?.kind, JSON.stringify(events.at(-1))).toBe("run_completed");
      expect(events.filter((e) => e.kind === "tool_call")).toHaveLength(1);
    }
    expect(double.jobs.length).toBe(40);
    const seen = await connections();
    // One LISTEN connection per instance (every channel on it), the rest the pooler's, at most its pool.
    expect(seen.listening).toBe(2);
    expect(seen.all - seen.listening).toBeLessThanOrEqual(POOL);
    expect(seen.all - seen.listening).toBeGreaterThan(0);
    expect((await bouncer.pools()).serverConnections).toBeLessThanOrEqual(POOL);
    // The control: the instances' pools held more connections (to the pooler) than Postgres saw.
    expect(a.db.poolStats()!.total + b.db.poolStats()!.total).toBeGreaterThan(POOL);
    // Nothing failed on either instance for the pooler (a named statement prepared on another server connection, say).
    for (const s of [a, b]) expect(s.logs.filter((l) => /"level":(50|60)/.test(l)), s.logs.filter((l) => /"level":(50|60)/.test(l)).join("\n")).toEqual([]);
  }, 90_000);

  it("a revocation made on B reaches the instance holding the machine (A) through its direct LISTEN connection at once", async () => {
    const m = await pairViaApi(a, a.dev, "pooled-revoke");
    const double = await connectWorkerDouble(a.url, m.token, callFirstTool("done"), undefined, open);
    const at = Date.now();
    const res = await b.fetch(`/v1/users/pooled-revoke/machines/${m.machineId}`, { method: "DELETE", headers: { authorization: `Bearer ${a.dev.appKey}` } });
    expect(res.status).toBe(200);
    expect((await double.closed).code).toBe(WORKER_CLOSE.revoked);
    // The notification, not the instance's next beat (every 10 s).
    expect(Date.now() - at).toBeLessThan(3_000);
  });
});
