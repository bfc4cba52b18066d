import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WebSocket } from "ws";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { answerNothing, closeRawWorkers, connectWorkerDouble } from "../helpers/raw-worker.js";
import { HeartbeatBatch } from "../../server/machines/heartbeats.js";
import type { Sql } from "../../server/db/open.js";

/**
 * Heartbeats are written in batches: 50 machines beating every second cost about
 * one statement a second on the machines' tables, not one (or three) per beat,
 * and every beat still lands. Statements are counted on the real database, by a
 * statement-level trigger on `machines` and `runtimes` (it fires once per
 * statement, whatever rows it touched).
 */
onEachDatabase("heartbeats written in batches, on $db.name", (db) => {
  const MACHINES = 50;
  let server: TestServer;
  const open: WebSocket[] = [];

  beforeAll(async () => {
    // A 3 s heartbeat timeout: the doubles beat every second. The clock runs, so each write's time shows.
    server = await startTestServerOn(db, { WORKER_HEARTBEAT_TIMEOUT_SECONDS: "3" }, { runningClock: true });
  });
  afterAll(async () => {
    await closeRawWorkers(open);
    await server?.close();
    removeTempDirs();
  });

  it(`${MACHINES} machines beating every second: at most 2 statements a second write the machines' tables, and every machine's last heartbeat keeps moving`, async () => {
    const paired: Awaited<ReturnType<typeof pairViaApi>>[] = [];
    for (let i = 0; i < MACHINES; i++) {
      // Past the pairing codes one address may ask for in 10 minutes (20), the clock moves on.
      if (i % 20 === 19) server.clock.advance(601);
      paired.push(await pairViaApi(server, server.dev, `beater-${i % 5}`));
    }
    await Promise.all(paired.map((m) => connectWorkerDouble(server.url, m.token, answerNothing, undefined, open)));

    await server.db.exec(`
      CREATE SEQUENCE test_machine_writes MINVALUE 0 START 0;
      CREATE FUNCTION test_count_machine_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('test_machine_writes'); RETURN NULL; END $$;
      CREATE TRIGGER test_count AFTER INSERT OR UPDATE OR DELETE ON machines FOR EACH STATEMENT EXECUTE FUNCTION test_count_machine_write();
      CREATE TRIGGER test_count AFTER INSERT OR UPDATE OR DELETE ON runtimes FOR EACH STATEMENT EXECUTE FUNCTION test_count_machine_write();`);
    const writes = async () => {
      const [r] = await server.db.query<{ n: string; called: boolean }>(`SELECT last_value AS n, is_called AS called FROM test_machine_writes`);
      return r.called ? Number(r.n) + 1 : 0;
    };
    const lastBeats = async () =>
      new Map(
        (await server.db.query<{ id: string; at: Date | string }>(`SELECT id, last_heartbeat_at AS at FROM machines WHERE id = ANY($1::text[])`, [paired.map((m) => m.machineId)])).map((r) => [
          r.id,
          new Date(r.at).getTime(),
        ]),
      );

    const w0 = await writes();
    const before = await lastBeats();
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 6_000));
    const seconds = (Date.now() - t0) / 1000;
    const statements = (await writes()) - w0;
    const after = await lastBeats();

    // About 6 × 50 beats came meanwhile; they cost about one statement a second (unbatched: 3 per beat, 900).
    expect(statements / seconds).toBeLessThanOrEqual(2);
    expect(statements).toBeGreaterThanOrEqual(3);
    for (const m of paired) expect(after.get(m.machineId)!, m.machineId).toBeGreaterThan(before.get(m.machineId)! + 2_000);
    // And the machines read online.
    const res = await server.fetch(`/v1/users/beater-0/compute`, { headers: { authorization: `Bearer ${server.dev.appKey}` } });
    expect(res.status).toBe(200);
  }, 90_000);
});

/** The batch itself, on a stand-in for the database: what an outage does to it. */
describe("a heartbeat batch meeting the database unreachable", () => {
  it("answers its beats 'not revoked' (the connections stay), keeps them, and writes them at the next flush", async () => {
    const statements: { text: string; params: unknown[] }[] = [];
    let down = true;
    const sql: Sql = {
      exec: async () => {},
      query: async <T>(text: string, params: unknown[] = []) => {
        statements.push({ text, params });
        if (down) throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
        return (text.includes("revoked_at IS NOT NULL") ? [{ id: "mch_gone" }] : []) as T[];
      },
    };
    const batch = new HeartbeatBatch(sql, { now: () => new Date() }, 20);
    expect(await Promise.all([batch.beat("mch_a", "inst_1", []), batch.beat("mch_gone", "inst_1", [])])).toEqual([{ revoked: false }, { revoked: false }]);
    expect(statements).toHaveLength(1);
    down = false;
    // Kept: the next flush writes both, with any new beat, in one statement; the revocation now shows.
    expect(await Promise.all([batch.beat("mch_b", "inst_1", ["ollama"]), new Promise((r) => setTimeout(r, 50)).then(() => batch.beat("mch_gone", "inst_1", []))])).toEqual([
      { revoked: false },
      { revoked: true },
    ]);
    const writes = statements.slice(1).filter((s) => s.text.includes("UPDATE machines"));
    expect((writes[0].params[0] as string[]).sort()).toEqual(["mch_a", "mch_b", "mch_gone"]);
    await batch.stop();
  });

  it("a failure that is not an outage fails its beats (the connection reports it), and the next beats are written", async () => {
    let fail = true;
    const sql: Sql = {
      exec: async () => {},
      query: async <T>() => {
        if (fail) throw new Error("syntax error");
        return [] as T[];
      },
    };
    const batch = new HeartbeatBatch(sql, { now: () => new Date() }, 10);
    await expect(batch.beat("mch_a", "inst_1", [])).rejects.toThrow(/syntax error/);
    fail = false;
    expect(await batch.beat("mch_a", "inst_1", [])).toEqual({ revoked: false });
    await batch.stop();
  });
});
