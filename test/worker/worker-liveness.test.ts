import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WebSocket } from "ws";
import { WORKER_CLOSE, workerMessage } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { answerNothing, closeRawWorkers, connectRawWorker, connectWorkerDouble, DOUBLE_RUNTIMES, type WorkerDouble } from "../helpers/raw-worker.js";
import { HeartbeatBatch } from "../../server/machines/heartbeats.js";
import type { Sql } from "../../server/db/open.js";

/**
 * A machine's liveness lives with its connection: an idle machine's heartbeats
 * write no row (the instance holding it writes its own row, one for all of them),
 * a busy change writes its runtime's row, and what the beats checked before (a
 * revocation missed by its notification) shows at the instance's beat. Rows are
 * counted on the real database by a row-level trigger on `machines` and `runtimes`.
 */
onEachDatabase("machine liveness with the connection, on $db.name", (db) => {
  const MACHINES = 50;
  let server: TestServer;
  const open: WebSocket[] = [];
  let doubles: WorkerDouble[] = [];
  let paired: Awaited<ReturnType<typeof pairViaApi>>[] = [];
  const key = () => ({ authorization: `Bearer ${server.dev.appKey}` });
  const stateOf = async (user: string) => {
    const res = await server.fetch(`/v1/users/${user}/compute`, { headers: key() });
    expect(res.status).toBe(200);
    return ((await res.json()) as { machines: { id: string; state: string; lastSeenAt: string | null }[] }).machines;
  };
  const aliveAt = async () => {
    const [r] = await server.db.query<{ at: Date | string }>(`SELECT alive_at AS at FROM server_instances WHERE id = $1`, [server.services.workers.instance]);
    return new Date(r.at).getTime();
  };

  beforeAll(async () => {
    // A 3 s heartbeat timeout: the doubles beat every second, the instance every second. The clock runs.
    server = await startTestServerOn(db, { WORKER_HEARTBEAT_TIMEOUT_SECONDS: "3" }, { runningClock: true });
    paired = [];
    for (let i = 0; i < MACHINES; i++) {
      // Past the pairing codes one address may ask for in 10 minutes (20), the clock moves on.
      if (i % 20 === 19) server.clock.advance(601);
      paired.push(await pairViaApi(server, server.dev, `beater-${i % 5}`));
    }
    doubles = await Promise.all(paired.map((m) => connectWorkerDouble(server.url, m.token, answerNothing, undefined, open)));
  }, 120_000);
  afterAll(async () => {
    await closeRawWorkers(open);
    await server?.close();
    removeTempDirs();
  });

  it(`${MACHINES} machines beating every second write no row for it; the instance's own row moves; a busy change writes its runtime's row`, async () => {
    await server.db.exec(`
      CREATE SEQUENCE test_machine_rows MINVALUE 0 START 0;
      CREATE FUNCTION test_count_machine_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('test_machine_rows'); RETURN NULL; END $$;
      CREATE TRIGGER test_count AFTER INSERT OR UPDATE OR DELETE ON machines FOR EACH ROW EXECUTE FUNCTION test_count_machine_row();
      CREATE TRIGGER test_count AFTER INSERT OR UPDATE OR DELETE ON runtimes FOR EACH ROW EXECUTE FUNCTION test_count_machine_row();`);
    const rows = async () => {
      const [r] = await server.db.query<{ n: string; called: boolean }>(`SELECT last_value AS n, is_called AS called FROM test_machine_rows`);
      return r.called ? Number(r.n) + 1 : 0;
    };

    const r0 = await rows();
    const alive0 = await aliveAt();
    await new Promise((r) => setTimeout(r, 6_000));
    // About 6 × 50 beats came meanwhile: no row of theirs written (before: 50 rows a second).
    expect(await rows()).toBe(r0);
    // The control: the instance said it is alive meanwhile, and every machine reads online through it.
    expect(await aliveAt()).toBeGreaterThan(alive0 + 3_000);
    for (let u = 0; u < 5; u++) for (const m of await stateOf(`beater-${u}`)) expect(m.state, m.id).toBe("online");

    // A change is written: a machine whose beats this test sends says its runtime is busy, then idle again (its runtime's row, twice).
    const own = await pairViaApi(server, server.dev, "liveness-busy");
    const w = await connectRawWorker(server.url, own.token, open);
    w.send(workerMessage("hello", { client: "worker-double", version: "1", runtimes: DOUBLE_RUNTIMES }));
    await w.next("welcome");
    w.send(workerMessage("heartbeat", { busy: [] }));
    await new Promise((r) => setTimeout(r, 1_500));
    const r1 = await rows();
    w.send(workerMessage("heartbeat", { busy: ["ollama"] }));
    await expect.poll(async () => (await stateOf("liveness-busy"))[0].state, { timeout: 5_000 }).toBe("busy");
    w.send(workerMessage("heartbeat", { busy: ["ollama"] }));
    w.send(workerMessage("heartbeat", { busy: [] }));
    await expect.poll(async () => (await stateOf("liveness-busy"))[0].state, { timeout: 5_000 }).toBe("online");
    expect((await rows()) - r1).toBe(2);
  }, 60_000);

  it("a revocation missed by its notification closes the machine's connection at the instance's next beat; the others stay", async () => {
    const gone = doubles[1];
    const stays = doubles[2];
    // Removed behind the service's back: no notification.
    await server.db.query(`UPDATE machines SET revoked_at = now(), connected_instance = NULL WHERE id = $1`, [paired[1].machineId]);
    const closed = await Promise.race([gone.closed, new Promise<null>((r) => setTimeout(() => r(null), 5_000))]);
    expect(closed?.code).toBe(WORKER_CLOSE.revoked);
    // The control: a machine of the same instance, not removed, is still held and online.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(server.services.workers.holds(stays.machineId)).toBe(true);
    expect((await stateOf("beater-2")).find((m) => m.id === paired[2].machineId)?.state).toBe("online");
  }, 30_000);

  it("online means held by an instance that is alive: a dead instance's machine reads offline (last seen when it was last alive), a row naming this instance for a machine it does not hold is set right", async () => {
    const [lone] = [await pairViaApi(server, server.dev, "liveness-lone")];
    const now = server.clock.now().getTime();
    const dead = new Date(now - 60_000);
    await server.db.query(`INSERT INTO server_instances (id, started_at, alive_at) VALUES ('inst_dead', $1, $1)`, [dead]);
    await server.db.query(`UPDATE machines SET connected_instance = 'inst_dead', connected_at = $2, last_heartbeat_at = $2 WHERE id = $1`, [lone.machineId, new Date(now - 600_000)]);
    let [m] = await stateOf("liveness-lone");
    expect([m.state, new Date(m.lastSeenAt!).getTime()]).toEqual(["offline", dead.getTime()]);
    // Alive again: online, through its instance's row alone.
    await server.db.query(`UPDATE server_instances SET alive_at = $1 WHERE id = 'inst_dead'`, [server.clock.now()]);
    [m] = await stateOf("liveness-lone");
    expect(m.state).toBe("online");

    // A row naming this instance for a machine not held here (its offline write lost): written offline at the next beat.
    await server.db.query(`UPDATE machines SET connected_instance = $2 WHERE id = $1`, [lone.machineId, server.services.workers.instance]);
    await expect.poll(async () => (await stateOf("liveness-lone"))[0].state, { timeout: 5_000 }).toBe("offline");
    // The machines it does hold stay online (the control).
    for (const d of doubles.slice(2, 6)) expect(server.services.workers.holds(d.machineId)).toBe(true);
    expect((await stateOf("beater-3")).find((x) => x.id === paired[3].machineId)?.state).toBe("online");
  }, 30_000);
});

/** The batch itself, on a stand-in for the database and a clock the test moves. */
describe("the heartbeat batch", () => {
  const standIn = () => {
    const statements: { text: string; params: unknown[] }[] = [];
    const state = { down: false, fail: false };
    const sql: Sql = {
      exec: async () => {},
      query: async <T>(text: string, params: unknown[] = []) => {
        statements.push({ text, params });
        if (state.down) throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
        if (state.fail) throw new Error("syntax error");
        return [] as T[];
      },
    };
    let now = Date.parse("2026-11-27T10:00:00Z");
    const clock = { now: () => new Date(now), advance: (ms: number) => (now += ms) };
    return { statements, state, sql, clock };
  };
  const settle = () => new Promise((r) => setTimeout(r, 40));

  it("writes nothing for idle beats until a machine's last-seen is due, then one statement for those due; a busy change is written once", async () => {
    const { statements, sql, clock } = standIn();
    const batch = new HeartbeatBatch(sql, clock, 5, 300_000);
    batch.forget("mch_a", clock.now());
    batch.forget("mch_b", clock.now());
    for (let i = 0; i < 10; i++) {
      clock.advance(10_000);
      batch.beat("mch_a", "inst_1", []);
      batch.beat("mch_b", "inst_1", []);
      await settle();
    }
    // The first beat writes the (unknown) busy flags; after that, 100 s of idle beats write nothing.
    expect(statements.map((s) => s.text.includes("UPDATE runtimes"))).toEqual([true]);
    statements.length = 0;
    clock.advance(200_000);
    batch.beat("mch_a", "inst_1", []);
    await settle();
    expect(statements).toHaveLength(1);
    expect(statements[0].text).toContain("last_heartbeat_at");
    expect(statements[0].params[0]).toEqual(["mch_a"]);
    statements.length = 0;
    // Busy: written once (with its last-seen, due as mch_a's was); the same again: nothing.
    batch.beat("mch_b", "inst_1", ["ollama", "ollama"]);
    await settle();
    batch.beat("mch_b", "inst_1", ["ollama"]);
    await settle();
    expect(statements.map((s) => (s.text.includes("UPDATE runtimes") ? "busy" : "seen"))).toEqual(["seen", "busy"]);
    expect(statements[1].params[0]).toBe(JSON.stringify([{ id: "mch_b", busy: ["ollama"] }]));
    // Disconnected: when it was last heard, and nothing more of it is written.
    expect(batch.disconnected("mch_a")?.getTime()).toBe(clock.now().getTime());
    await batch.stop();
  });

  it("an outage keeps what was due for the next flush; a failure that is not one is reported and tried again", async () => {
    const { statements, state, sql, clock } = standIn();
    const failures: unknown[] = [];
    const batch = new HeartbeatBatch(sql, clock, 5, 300_000, (err) => failures.push(err));
    state.down = true;
    batch.beat("mch_a", "inst_1", ["ollama"]);
    await settle();
    expect(statements.length).toBeGreaterThanOrEqual(1);
    expect(failures).toEqual([]);
    state.down = false;
    statements.length = 0;
    await settle();
    // Tried again with nothing new said: both the last-seen (never written) and the busy flag.
    expect(statements.map((s) => (s.text.includes("UPDATE runtimes") ? "busy" : "seen"))).toEqual(["seen", "busy"]);
    state.fail = true;
    batch.beat("mch_b", "inst_1", []);
    await settle();
    expect(String(failures[0])).toMatch(/syntax error/);
    state.fail = false;
    statements.length = 0;
    await settle();
    expect(statements.some((s) => (s.params[0] as string[] | string).includes?.("mch_b"))).toBe(true);
    await batch.stop();
  });
});
