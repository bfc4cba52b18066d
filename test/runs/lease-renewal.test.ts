import { afterAll, beforeAll, expect, it } from "vitest";
import { onPostgres } from "../helpers/databases.js";
import { removeTempDirs } from "../helpers/process.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";

/**
 * The lease renewal and the run writer both lock many runs' rows. The writer locks its batch's rows in id order;
 * a renewal that locked them in its scan's order (the table's, in a bitmap or sequential scan of hundreds of runs)
 * deadlocked with it: under 600 streams at once on Postgres, every renewal did, stalling the steps behind it for
 * the deadlock timeout and leaving the leases unextended. Here a transaction holds the lowest run's row, as a
 * writer's statement does while it goes on to the next, and then takes the highest.
 */
onPostgres("the lease renewal and the run writer's locks, on postgres", (db) => {
  let server: TestServer;
  const RUNS = 300;
  let ids: string[] = [];

  beforeAll(async () => {
    server = await startTestServerOn(db);
    const res = await server.fetch("/v1/runs", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
      body: JSON.stringify({ user: "lena", prompt: "hello", model: "svc/echo" }),
    });
    expect(res.status).toBe(200);
    const seed = res.headers.get("service-run-id")!;
    await res.text();
    // Runs driven by this instance, written highest id first: the table's order is the reverse of the ids'.
    const rows = await server.db.query<{ id: string }>(
      `INSERT INTO runs SELECT (jsonb_populate_record(r, jsonb_build_object('id', 'run_lease' || lpad(i::text, 4, '0'), 'status', 'running', 'lease_owner', $2::text,
                'lease_expires_at', now() + interval '1 minute', 'finished_at', NULL, 'request_hash', NULL))).*
         FROM runs r, generate_series($3::int, 1, -1) AS i WHERE r.id = $1 RETURNING id`,
      [seed, server.services.runStore.instance, RUNS],
    );
    ids = rows.map((r) => r.id).sort();
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  it("a renewal of 300 runs waits its turn without deadlocking a writer that holds the lowest run and then takes the highest", { timeout: 30_000 }, async () => {
    const store = server.services.runStore;
    const until = new Date(Date.now() + 120_000);
    const [lowest, highest] = [ids[0], ids.at(-1)!];
    const outcome = await server.db.exclusive(72_410_031, async (sql) => {
      await sql.exec("BEGIN");
      try {
        await sql.query("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", [lowest]);
        const renewed = store.renew(ids, until).then(
          (held) => ({ held, error: null }),
          (error: Error) => ({ held: null, error }),
        );
        // The renewal is under way: it has locked what it could before reaching the lowest run's row.
        await new Promise((r) => setTimeout(r, 300));
        const startedAt = Date.now();
        await sql.query("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", [highest]);
        const waitedMs = Date.now() - startedAt;
        await sql.exec("COMMIT");
        return { waitedMs, ...(await renewed) };
      } catch (err) {
        await sql.exec("ROLLBACK").catch(() => {});
        return { waitedMs: -1, held: null, error: err as Error };
      }
    });
    // The writer's transaction took the highest row at once (the renewal held none of them: it waits at the lowest).
    expect(outcome.error?.message ?? null).toBeNull();
    expect(outcome.waitedMs).toBeGreaterThanOrEqual(0);
    expect(outcome.waitedMs).toBeLessThan(500);
    // And the renewal, once the writer committed, extended every lease (the positive control: it did its work).
    expect(outcome.held?.size).toBe(RUNS);
    const [row] = await server.db.query<{ n: number }>("SELECT count(*)::int AS n FROM runs WHERE id = ANY($1::text[]) AND lease_expires_at = $2", [ids, until]);
    expect(row.n).toBe(RUNS);
  });
});
