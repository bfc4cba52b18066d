import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { randomId } from "../../server/crypto.js";
import type { ChatMessage } from "@svc/contract";

/**
 * A model run's conversation is stored a message a row (`run_messages`): each step adds the messages it made,
 * instead of the whole conversation again on the run's row. An instance taking the run over reads it back in
 * order. While an instance of a version before `run_messages` is alive (a rolling upgrade), the row keeps the
 * whole conversation as well, where that version reads it.
 */
onEachDatabase("a run's conversation, a row a message, on $db.name", (db) => {
  let server: TestServer;
  let endUserId: string;
  const tenant = () => ({ appId: server.dev.appId, environment: "test" as const });

  beforeAll(async () => {
    server = await startTestServerOn(db);
    endUserId = await ensureEndUser(server.db, tenant(), "conversing");
  });
  afterAll(async () => {
    await server?.close();
  });

  const message = (n: number): ChatMessage => (n % 2 === 0 ? { role: "user", content: `question ${n}` } : { role: "assistant", content: `answer ${n}` });
  const messages = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => message(from + i));

  /** A run this instance drives (route `service`, so the claim below may take it back without a machine). */
  async function newRun(): Promise<string> {
    const id = randomId("run_", 24);
    await server.db.query(
      `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, route_kind, lease_owner, lease_expires_at, created_at)
       VALUES ($1, $2, 'test', $3, 'runs', 'm', '{}', 'running', 'service', $4, now() + interval '1 hour', now())`,
      [id, server.dev.appId, endUserId, server.services.runStore.instance],
    );
    return id;
  }

  /** Writes turn `seq`'s step: one event and the messages `from` to `to` of the conversation. */
  const step = (runId: string, seq: number, from: number, to: number) =>
    server.services.runStore.write(runId, endUserId, new Date(), {
      events: [{ seq, kind: "text_delta", data: { kind: "text_delta", turn: seq, text: `turn ${seq}` } }],
      patch: { turns: seq, transcript: { from, messages: messages(from, to) } },
    });

  const stored = async (runId: string) => {
    const [row] = await server.db.query<{ transcript: ChatMessage[] | null }>(`SELECT transcript FROM runs WHERE id = $1`, [runId]);
    const rows = await server.db.query<{ n: number; message: ChatMessage }>(`SELECT n, message FROM run_messages WHERE run_id = $1 ORDER BY n`, [runId]);
    return { column: row.transcript, rows };
  };

  /** The run as an instance taking it over reads it (its lease given up first). */
  async function takenOver(runId: string): Promise<ChatMessage[] | null> {
    await server.db.query(`UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1`, [runId]);
    const [run] = await server.services.runStore.claim(new Date(), new Date(Date.now() + 60_000), runId);
    return run.transcript;
  }

  it("each step adds its messages once: the row keeps none, a step written again adds nothing, and a takeover reads them all in order", async () => {
    const runId = await newRun();
    expect(await step(runId, 1, 0, 3)).toBe(true);
    expect(await step(runId, 2, 3, 5)).toBe(true);
    // The second step again (its commit's answer lost to an outage, say): nothing twice.
    expect(await step(runId, 2, 3, 5)).toBe(true);
    expect(await step(runId, 3, 5, 8)).toBe(true);
    const { column, rows } = await stored(runId);
    expect(column).toBeNull();
    expect(rows).toEqual(messages(0, 8).map((m, n) => ({ n, message: m })));
    expect(await takenOver(runId)).toEqual(messages(0, 8));
  });

  it("while an instance of a version before it is alive, the row keeps the whole conversation too, to the run's end (the rows alone before it came: the control)", async () => {
    const runId = await newRun();
    expect(await step(runId, 1, 0, 2)).toBe(true);
    expect((await stored(runId)).column).toBeNull();
    // An older instance beats (no stores_run_messages): from the next step the row holds everything, the earlier messages too.
    const older = randomId("inst_", 12);
    await server.db.query(`INSERT INTO server_instances (id, started_at, alive_at) VALUES ($1, now(), now())`, [older]);
    try {
      expect(await step(runId, 2, 2, 4)).toBe(true);
      expect((await stored(runId)).column).toEqual(messages(0, 4));
      // That version writes the row's conversation whole (its own next step), as it always did.
      await server.db.query(`UPDATE runs SET transcript = $2::jsonb WHERE id = $1`, [runId, JSON.stringify(messages(0, 5))]);
    } finally {
      await server.db.query(`DELETE FROM server_instances WHERE id = $1`, [older]);
    }
    // It is gone; the run has its conversation on its row, so its steps go on keeping it there.
    expect(await step(runId, 3, 5, 7)).toBe(true);
    expect(await step(runId, 3, 5, 7)).toBe(true);
    const { column, rows } = await stored(runId);
    expect(column).toEqual(messages(0, 7));
    expect(await takenOver(runId)).toEqual(messages(0, 7));
    // The rows hold what this version wrote (the older one's message 4 is on the row only).
    expect(rows.map((r) => r.n)).toEqual([0, 1, 2, 3, 5, 6]);
  });
});
