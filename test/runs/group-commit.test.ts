import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GroupCommit, KeyedGroupCommit } from "../../server/db/group-commit.js";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { STEP_STATEMENT, watchingStatements } from "../helpers/statements.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { randomId } from "../../server/crypto.js";
import { RunWriter } from "../../server/runs/run-writer.js";

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

  it("answers each caller with what the write answered for its item, alone or in a batch", async () => {
    const gc = new GroupCommit<number, string>(async (items) => items.map((n) => `#${n}`));
    expect(await Promise.all([1, 2, 3].map((n) => gc.add(n)))).toEqual(["#1", "#2", "#3"]);
    expect(await gc.add(4)).toBe("#4");
  });

  it("per key: one key's items go together, one write of a key at a time; other keys' writes go meanwhile; a key's group is dropped once written", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const writes: string[][] = [];
    const gc = new KeyedGroupCommit<string, string>(async (items) => {
      writes.push(items);
      if (items.includes("a1")) await gate;
      return items.map((i) => i.toUpperCase());
    });
    const a1 = gc.add("a", "a1");
    await new Promise((r) => setImmediate(r));
    // a1 is in flight: a2 and a3 wait for it and go together; b's items go at once.
    const a23 = [gc.add("a", "a2"), gc.add("a", "a3")];
    const b = [gc.add("b", "b1"), gc.add("b", "b2")];
    expect(await Promise.all(b)).toEqual(["B1", "B2"]);
    expect(writes).toEqual([["a1"], ["b1", "b2"]]);
    expect(gc.size).toBe(1);
    release();
    expect(await Promise.all([a1, ...a23])).toEqual(["A1", "A2", "A3"]);
    expect(writes).toEqual([["a1"], ["b1", "b2"], ["a2", "a3"]]);
    expect(gc.size).toBe(0);
  });

  it("a batch failed by the database being away fails every caller with the outage at once, without writing each again; another failure is written item by item (the control)", async () => {
    const writes: number[][] = [];
    let outage = true;
    const gc = new GroupCommit<number>(async (items) => {
      writes.push(items);
      if (outage) throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
      if (items.length > 1) throw new Error("constraint violated");
    });
    const settled = await Promise.all([1, 2, 3].map((n) => gc.add(n).then(() => "ok", (e: { code?: string }) => e.code ?? "other")));
    expect(settled).toEqual(["ECONNREFUSED", "ECONNREFUSED", "ECONNREFUSED"]);
    expect(writes).toEqual([[1, 2, 3]]);
    outage = false;
    writes.length = 0;
    expect(await Promise.all([4, 5].map((n) => gc.add(n).then(() => "ok")))).toEqual(["ok", "ok"]);
    expect(writes).toEqual([[4, 5], [4], [5]]);
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
    await watchingStatements(server.db, (text) => void (text.includes(STEP_STATEMENT) && statements++), async () => {
      const owned = await Promise.all(runs.map((r) => runStore.write(r.id, r.endUserId, new Date(), step(r.id, 1))));
      expect(owned).toEqual(runs.map((_, i) => i !== 7));
      // 20 steps of 10 users (two each, both with a ledger row) in one statement, not 20.
      expect(statements).toBe(1);
      // The same step again (its commit's answer lost): told written, written once.
      expect(await runStore.write(runs[0].id, runs[0].endUserId, new Date(), step(runs[0].id, 1))).toBe(true);
    });
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

  it.runIf(db.name === "postgres")("a run's steps written one at a time are planned once per connection, not at every write (the run ids hidden from the custom plans)", async () => {
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    const endUserId = await ensureEndUser(server.db, tenant, "planned-once");
    const id = randomId("run_", 24);
    const instance = server.services.runStore.instance;
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, lease_owner, lease_expires_at, created_at) VALUES ($1, $2, 'test', $3, 'runs', 'm', '{}', 'running', $4, now() + interval '1 hour', now())`,
      [id, tenant.appId, endUserId, instance],
    );
    // Other runs this instance drives, and statistics, as under load (in a table of a few rows any plan finds one run as cheaply).
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, lease_owner, lease_expires_at, created_at)
       SELECT $1 || g, $2, 'test', $3, 'runs', 'm', '{}', 'running', $4, now() + interval '1 hour', now() FROM generate_series(1, 500) g`,
      [`${id}_other_`, tenant.appId, endUserId, instance],
    );
    await server.db.query(`ANALYZE runs`);
    // One connection, so its prepared statement's plans can be read; the writer's own statement, as the pool would send it.
    const plans = await server.db.exclusive(0x5eed, async (session) => {
      const writer = new RunWriter({ ...server.db, ...session }, instance);
      for (let turn = 1; turn <= 12; turn++) {
        const written = await writer.write(id, endUserId, new Date(), {
          events: [{ seq: turn, kind: "text_delta", data: { kind: "text_delta", turn, text: `turn ${turn}` } }],
          patch: { turns: turn, addInputTokens: 5, addOutputTokens: 3 },
          usage: [{ cost_class: "user_hardware", kind: "tokens", input_tokens: 5, output_tokens: 3, amount_micros: 0, period: "2026-11", unique_key: `tokens:${id}:${turn}` }],
        });
        expect(written.owned).toBe(true);
      }
      return session.query<{ generic_plans: string; custom_plans: string }>(`SELECT generic_plans::text, custom_plans::text FROM pg_prepared_statements WHERE statement LIKE $1`, [`%${STEP_STATEMENT}%`]);
    });
    // Every step was written (the control)...
    const [row] = await server.db.query<{ last_seq: number; usage: number }>(`SELECT last_seq, (SELECT count(*)::int FROM usage_rows u WHERE u.run_id = r.id) AS usage FROM runs r WHERE id = $1`, [id]);
    expect(row).toEqual({ last_seq: 12, usage: 12 });
    // ...and after Postgres's five custom plans, its generic plan served the rest (with the ids visible a one-run step's custom plan looked cheaper: planned at each of the 12).
    expect(plans).toHaveLength(1);
    expect(Number(plans[0].custom_plans)).toBeLessThanOrEqual(5);
    expect(Number(plans[0].generic_plans)).toBeGreaterThanOrEqual(7);
  });

  it("one user's ledger steps written in one statement are priced as one after another would be (overage past a tokens allowance, rounded per row)", async () => {
    const { runStore } = server.services;
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    const api = (method: string, path: string, body: unknown) =>
      server.fetch(path, { method, headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    const allowance = 20;
    const price = 1_500; // micros per 1,000 tokens: 1.5 µ a token, so a row's rounding shows
    expect((await api("POST", "/v1/plans", { slug: "gc-meter", name: "GC meter", allowance: { unit: "tokens", limit: allowance }, overage: true, overagePriceMicros: price })).status).toBe(201);
    expect((await api("PUT", "/v1/users/gc-metered/plan", { plan: "gc-meter" })).status).toBe(200);
    const endUserId = await ensureEndUser(server.db, tenant, "gc-metered");
    const runs = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const id = randomId("run_", 24);
        await server.db.query(
          `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, lease_owner, lease_expires_at, created_at) VALUES ($1, $2, 'test', $3, 'runs', 'm', '{}', 'running', $4, now() + interval '1 hour', now())`,
          [id, tenant.appId, endUserId, runStore.instance],
        );
        return id;
      }),
    );
    const period = new Date().toISOString().slice(0, 7);
    // Each step two turns' rows (7 and 4 + i tokens): 12 rows of one user, made in one turn of the event loop.
    const tokens = (i: number, turn: number) => (turn === 1 ? 7 : 4 + i);
    const row = (runId: string, i: number, turn: number) => ({
      cost_class: "user_hardware" as const, kind: "tokens", input_tokens: tokens(i, turn) - 1, output_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, amount_micros: 0, period, unique_key: `tokens:${runId}:${turn}`,
    });
    let statements = 0;
    await watchingStatements(server.db, (text) => void (text.includes(STEP_STATEMENT) && statements++), async () => {
      const owned = await Promise.all(runs.map((id, i) => runStore.write(id, endUserId, new Date(), { usage: [row(id, i, 1), row(id, i, 2)] })));
      expect(owned).toEqual(runs.map(() => true));
      expect(statements).toBe(1);
    });
    const rows = await server.db.query<{ run_id: string; unique_key: string; tokens: number; amount_micros: string }>(
      `SELECT run_id, unique_key, (input_tokens + output_tokens)::int AS tokens, amount_micros::text FROM usage_rows WHERE end_user_id = $1 ORDER BY id`,
      [endUserId],
    );
    expect(rows.map((r) => r.unique_key)).toEqual(runs.flatMap((id) => [`tokens:${id}:1`, `tokens:${id}:2`]));
    // The serial computation, in the order written: each row priced on the total before it.
    let used = 0;
    const expected = rows.map((r) => {
      const over = Math.max(0, Math.min(r.tokens, used + r.tokens - allowance));
      used += r.tokens;
      return String(Math.floor((over * price) / 1000));
    });
    expect(rows.map((r) => r.amount_micros)).toEqual(expected);
    // Past the allowance from the third row on: the rows after it are priced in full.
    expect(expected.filter((m) => m !== "0").length).toBeGreaterThan(8);
  });
});
