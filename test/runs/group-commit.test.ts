import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GroupCommit } from "../../server/db/group-commit.js";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { randomId } from "../../server/crypto.js";

describe("group commit", () => {
  it("gathers what arrives in one turn of the event loop into one write; a lone write still goes", async () => {
    const batches: number[][] = [];
    const gc = new GroupCommit<number>(async (items) => void batches.push(items));
    await Promise.all([1, 2, 3, 4, 5].map((n) => gc.add(n)));
    await gc.add(6);
    expect(batches).toEqual([[1, 2, 3, 4, 5], [6]]);
  });

  it("a failed batch is written again item by item: only the bad item's caller fails; writes arriving meanwhile go next", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const written: number[][] = [];
    const gc = new GroupCommit<number>(async (items) => {
      if (items.includes(1)) await gate;
      if (items.includes(2)) throw new Error("constraint violated");
      written.push(items);
    });
    const first = [gc.add(1), gc.add(2), gc.add(5)].map((p) => p.then(() => "ok", (e: Error) => e.message));
    await new Promise((r) => setImmediate(r));
    const later = [gc.add(3), gc.add(4)];
    release();
    expect(await Promise.all(first)).toEqual(["ok", "constraint violated", "ok"]);
    await Promise.all(later);
    expect(written).toEqual([[1], [5], [3, 4]]);
  });

  it("respects the largest batch", async () => {
    const sizes: number[] = [];
    const gc = new GroupCommit<number>(async (items) => void sizes.push(items.length), 4);
    await Promise.all(Array.from({ length: 10 }, (_, i) => gc.add(i)));
    expect(sizes).toEqual([4, 4, 2]);
  });
});

/**
 * Group commit on the database. `svc/echo` answers under concurrency: one run and
 * one ledger row per answer, never more or fewer, however they were grouped. The
 * steps of runs driven on one instance (`RunWriter`): made together, written
 * together; each driver told whether its run's lease held; a step whose first
 * event is stored already (sent again after a lost commit answer) written once.
 */
onEachDatabase("group commit on $db.name: svc/echo records and run steps", (db) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServerOn(db);
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  it("200 concurrent answers: 200 runs and 200 rows, each answer's run id among them", async () => {
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        server.fetch("/v1/chat/completions", {
          method: "POST",
          headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "svc/echo", user: `gc-${i % 7}`, messages: [{ role: "user", content: `hello ${i}` }] }),
        }),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(200).fill(200));
    const ids = answers.map((a) => a.headers.get("service-run-id"));
    const rows = await server.db.query<{ run_id: string; kind: string }>(`SELECT run_id, kind FROM usage_rows WHERE kind = 'echo'`);
    expect(rows).toHaveLength(200);
    expect(new Set(rows.map((r) => r.run_id))).toEqual(new Set(ids));
    const runs = await server.db.query<{ n: string | number }>(`SELECT count(*) AS n FROM runs WHERE model = 'svc/echo'`);
    expect(Number(runs[0].n)).toBe(200);
  });

  it("20 runs' steps made together are a few statements; a run whose lease is elsewhere is told so and gets nothing; a step sent twice is written once", async () => {
    const { runStore } = server.services;
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    const runs = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const endUserId = await ensureEndUser(server.db, tenant, `writer-${i % 10}`);
        const id = randomId("run_", 24);
        const lease = i === 7 ? "another-instance" : runStore.instance;
        await server.db.query(
          `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, lease_owner, lease_expires_at, created_at) VALUES ($1, $2, 'test', $3, 'runs', 'm', '{}', 'running', $4, now() + interval '1 hour', now())`,
          [id, tenant.appId, endUserId, lease],
        );
        return { id, endUserId };
      }),
    );
    const step = (runId: string, turn: number) => ({
      events: [{ seq: turn, kind: "text_delta" as const, data: { kind: "text_delta" as const, turn, text: `turn ${turn}` } }],
      patch: { turns: turn, addInputTokens: 5, addOutputTokens: 3 },
      usage: [{ cost_class: "user_hardware" as const, kind: "tokens", input_tokens: 5, output_tokens: 3, cache_read_tokens: 0, cache_write_tokens: 0, amount_micros: 0, period: "2026-11", unique_key: `tokens:${runId}:${turn}` }],
    });
    let statements = 0;
    const query = server.db.query.bind(server.db);
    server.db.query = (async (text: string, params?: unknown[]) => {
      if (text.includes("jsonb_to_recordset($1::jsonb) AS x(run_id")) statements++;
      return query(text, params);
    }) as typeof server.db.query;
    try {
      const owned = await Promise.all(runs.map((r) => runStore.write(r.id, r.endUserId, new Date(), step(r.id, 1))));
      expect(owned).toEqual(runs.map((_, i) => i !== 7));
      // One statement per end user at most in each (10 users): 20 steps in 2 to 4 statements, not 20.
      expect(statements).toBeGreaterThanOrEqual(2);
      expect(statements).toBeLessThanOrEqual(4);
      // The same step again (its commit's answer lost): told written, written once.
      expect(await runStore.write(runs[0].id, runs[0].endUserId, new Date(), step(runs[0].id, 1))).toBe(true);
    } finally {
      server.db.query = query;
    }
    const rows = await server.db.query<{ id: string; last_seq: number; turns: number; input_tokens: string; events: number; usage: number }>(
      `SELECT r.id, r.last_seq, r.turns, r.input_tokens::text, (SELECT count(*)::int FROM run_events e WHERE e.run_id = r.id) AS events,
              (SELECT count(*)::int FROM usage_rows u WHERE u.run_id = r.id) AS usage
         FROM runs r WHERE r.id = ANY($1::text[]) ORDER BY r.id`,
      [runs.map((r) => r.id)],
    );
    for (const row of rows) {
      const lost = row.id === runs[7].id;
      expect(row).toMatchObject(lost ? { last_seq: 0, turns: 0, input_tokens: "0", events: 0, usage: 0 } : { last_seq: 1, turns: 1, input_tokens: "5", events: 1, usage: 1 });
    }
  });
});
