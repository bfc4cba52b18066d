import type { ApprovalDecision, ChatMessage, RunEvent } from "@svc/contract";
import { historyOf } from "./conversations.js";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { CostClassValue } from "../ledger/metering.js";
import { readLimits, type Limit, type LimitsRead } from "./limits.js";
import { RUN_EVENT_CHANNEL, RunWriter } from "./run-writer.js";
import type { RunStream } from "../bus/run-stream.js";
import { StreamedEvents } from "../bus/streamed-events.js";
import { ACTIVE_STATUSES_SQL, STORED_CONVERSATION_SQL, type AnsweredApproval, type AnsweredCall, type PendingMessage, type RunInputs, type RunRow, type StoredEvent, type Writes } from "./run-rows.js";

/**
 * A run's rows in SQL. The hot path of a run (its events, tool calls, answers,
 * leases) is written here in single statements, so each step is one round trip
 * and atomic: an event, the row it announces and the ledger row it records land
 * together or not at all (a driver's steps go through `RunWriter`, which puts the
 * steps of several runs in one statement). Cold paths (starting a run, reads) use Prisma.
 */

export { RUN_EVENT_CHANNEL };
/** Wakes the run's driver: an answer, a cancel (payload: run id). */
export const RUN_INPUT_CHANNEL = "svc_run_input";
/** Asks the instance holding a machine to drive a new run (payload: `<instance> <run id>`). */
export const RUN_DISPATCH_CHANNEL = "svc_run_dispatch";

/** An answer's condition: its run ($1) is active, and of the user named ($8) when one is. */
const ACTIVE_RUN_OF_USER = `EXISTS (SELECT 1 FROM runs r JOIN end_users u ON u.id = r.end_user_id
  WHERE r.id = $1 AND r.status IN (${ACTIVE_STATUSES_SQL}) AND ($8::text IS NULL OR u.external_id = $8))`;

/**
 * An answer's statement wakes the run's driver itself when that driver is not on
 * this instance: the notification ($9, see `wakePayload`) goes with the answer's
 * commit, in the same round trip. A driver here is woken directly, with the answer.
 */
const WAKE_DRIVER = `CASE WHEN $9::text IS NOT NULL THEN pg_notify('${RUN_INPUT_CHANNEL}', $9) END AS woke`;
/** On the run bus the answer's statement names the run's driver instead, and the wake goes to that instance alone (`RunStream.signal`). */
const DRIVER_OF_RUN = `CASE WHEN $9::text IS NOT NULL THEN (SELECT lease_owner FROM runs WHERE id = $1) END AS owner`;

/**
 * A `RunRow`'s columns of `runs`, for a statement's RETURNING, the conversation as stored (`STORED_CONVERSATION_SQL`).
 */
const RETURNED_RUN = "id, source, app_id, environment, end_user_id, model, request, status, route_kind, machine_id, runtime_name, turns, transcript, agent_state, output, input_tokens, output_tokens, last_seq, cancel_requested_at, cancel_reason, paused_at"
  .split(", ")
  .map((c) => (c === "transcript" ? `${STORED_CONVERSATION_SQL} AS transcript` : `runs.${c}`))
  .join(", ");

export class RunStore {
  private readonly writer: RunWriter;
  /** Runs' events on the run bus (`NATS_URL`), or null: in `run_events`. */
  readonly streamed: StreamedEvents | null;

  constructor(
    private readonly db: Database,
    readonly instance: string,
    /** The run bus (`NATS_URL`): runs' events go to its stream, not to `run_events`, until they end. */
    readonly stream: RunStream | null = null,
  ) {
    this.writer = new RunWriter(db, instance, stream !== null);
    this.streamed = stream ? new StreamedEvents(db, stream) : null;
  }

  /**
   * Writes a step of a run (group-committed with the steps of other runs, see
   * `RunWriter`), only while this instance holds the run's lease. False: the
   * lease was lost and nothing was written. On the bus the step's events are
   * published once it is committed (the write returns at the commit: the readers
   * here have them at once, and the publish's acknowledgement is off the run's
   * path); the run's next step is committed only once they are stored there, so
   * only its last step's events can be unpublished, and they are on its row
   * (`outbox`) for a takeover to publish.
   */
  async write(runId: string, endUserId: string, now: Date, w: Writes): Promise<boolean> {
    await this.streamed?.published(runId);
    const { owned, streamed } = await this.writer.write(runId, endUserId, now, w);
    if (owned && streamed && w.events?.length) this.streamed?.committed(runId, w.events);
    return owned;
  }

  /**
   * Takes the lease of runs this instance can drive: active, unleased or with a
   * lapsed lease, on a machine whose connection this instance holds. A run is taken
   * by one instance only (the update re-checks the lease under the row lock). The
   * sweep skips runs leased here and live (driven here), not one whose lease here
   * lapsed (nobody renews it: its driver is gone).
   */
  async claim(now: Date, until: Date, runId?: string): Promise<RunRow[]> {
    return this.db.query<RunRow>(
      // A run the service answers itself (route `service`, no machine) may be driven by any instance.
      `UPDATE runs SET lease_owner = $1, lease_expires_at = $3
        WHERE (runs.route_kind = 'service' OR EXISTS (SELECT 1 FROM machines m WHERE m.id = runs.machine_id AND m.connected_instance = $1 AND m.revoked_at IS NULL))
          AND runs.status IN (${ACTIVE_STATUSES_SQL})
          AND (runs.lease_owner IS NULL OR runs.lease_expires_at IS NULL OR runs.lease_expires_at < $2 OR runs.lease_owner = $1)
          ${runId ? "AND runs.id = $4" : "AND (runs.lease_owner IS DISTINCT FROM $1 OR runs.lease_expires_at < $2)"}
      RETURNING ${RETURNED_RUN}`,
      runId ? [this.instance, now, until, runId] : [this.instance, now, until],
      { prepared: true },
    );
  }

  /**
   * Creates a run the service answers itself (`svc/echo`, route `service`),
   * leased to this instance, with its ledger row (cost class `free`, kind `echo`,
   * like a chat completion's on `svc/echo`: never counted against an allowance),
   * in one statement; a follow-up's row names the run it continues.
   */
  async createServiceRun(r: { id: string; tenant: Tenant; endUserId: string; model: string; request: RunRow["request"]; runtime: string; now: Date; leaseUntil: Date; costClass: CostClassValue; period: string }): Promise<void> {
    await this.db.query(
      `WITH run AS (
         INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, route_kind, runtime_name, lease_owner, lease_expires_at, created_at, previous_run_id)
         VALUES ($1, $2, $3::"Environment", $4, 'runs', $5, $6::jsonb, 'queued', 'service', $7, $8, $9, $10, $13) RETURNING id)
       INSERT INTO usage_rows (app_id, environment, end_user_id, run_id, cost_class, kind, amount_micros, period, unique_key, created_at)
       SELECT $2, $3::"Environment", $4, run.id, $11::"CostClass", 'echo', 0, $12, 'run:' || run.id, $10 FROM run`,
      [r.id, r.tenant.appId, r.tenant.environment, r.endUserId, r.model, JSON.stringify(r.request), r.runtime, this.instance, r.leaseUntil, r.now, r.costClass, r.period, r.request.previousRunId ?? null],
      { prepared: true },
    );
  }

  /**
   * Runs no instance will drive: active, with no live lease, and either their
   * machine was removed, or the app cancelled it, or no lease since `before` (the
   * grace: the machine never came back anywhere). A lease given up when the
   * machine's link was lost ends at that moment (`release`), so the grace counts
   * from then; a run never leased, from its start. Taken here only to be ended
   * (cancelled, or failed: `machine_removed` says why).
   */
  async claimOrphans(now: Date, before: Date, until: Date): Promise<(RunRow & { machine_removed: boolean })[]> {
    return this.db.query<RunRow & { machine_removed: boolean }>(
      `WITH o AS (
         SELECT r.id, m.revoked_at IS NOT NULL AS machine_removed FROM runs r LEFT JOIN machines m ON m.id = r.machine_id
          WHERE r.status IN (${ACTIVE_STATUSES_SQL})
            AND (r.lease_expires_at IS NULL OR r.lease_expires_at < $4)
            AND (m.revoked_at IS NOT NULL OR r.cancel_requested_at IS NOT NULL OR (r.lease_expires_at IS NULL AND r.created_at < $2) OR r.lease_expires_at < $2)
          FOR UPDATE OF r SKIP LOCKED)
       UPDATE runs SET lease_owner = $1, lease_expires_at = $3 FROM o
        WHERE runs.id = o.id AND (runs.lease_expires_at IS NULL OR runs.lease_expires_at < $4)
      RETURNING ${RETURNED_RUN}, o.machine_removed`,
      [this.instance, before, until, now],
      { prepared: true },
    );
  }

  /** Of these jobs a reconnecting machine's worker kept, those whose agent run goes on (the others are cancelled). */
  async liveJobs(machineId: string, jobIds: string[]): Promise<Set<string>> {
    if (jobIds.length === 0) return new Set();
    const rows = await this.db.query<{ job: string }>(
      `SELECT agent_state->>'jobId' AS job FROM runs WHERE machine_id = $1 AND status IN ('queued', 'running', 'waiting') AND agent_state->>'jobId' = ANY($2::text[])`,
      [machineId, jobIds],
    );
    return new Set(rows.map((r) => r.job));
  }

  /** The text a run streamed so far (its stored `text_delta` events, in order): an agent run taken over after a lost link goes on from it. */
  async streamedText(runId: string): Promise<string> {
    const streamed = await this.streamed?.all(runId);
    if (streamed) return streamed.filter((e) => e.data.kind === "text_delta").map((e) => (e.data as { text: string }).text).join("");
    const rows = await this.db.query<{ text: string | null }>(`SELECT string_agg(data->>'text', '' ORDER BY seq) AS text FROM run_events WHERE run_id = $1 AND kind = 'text_delta'`, [runId]);
    return rows[0]?.text ?? "";
  }

  /** How many times turn `turn` of the run was announced restarted (read at a takeover only). */
  async restarts(runId: string, turn: number): Promise<number> {
    const streamed = await this.streamed?.all(runId);
    if (streamed) return streamed.filter((e) => e.data.kind === "turn_restarted" && e.data.turn === turn).length;
    const rows = await this.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM run_events WHERE run_id = $1 AND kind = 'turn_restarted' AND (data->>'turn')::int = $2`, [runId, turn], { prepared: true });
    return rows[0]?.n ?? 0;
  }

  /**
   * Extends the leases of the runs driven here; returns the ids still held. The rows are locked in id order,
   * as the run writer's statements lock theirs (`run-writer.ts`): a plain `UPDATE … WHERE id = ANY(…)` locked
   * them in the order of its scan (a sequential or bitmap scan: the table's), so with many runs at once it
   * deadlocked with the writer's steps every renewal; each deadlock stalled the steps waiting behind it for
   * Postgres's deadlock_timeout (1 s), and the renewal, its victim, kept the leases from being extended.
   */
  async renew(runIds: string[], until: Date): Promise<Set<string>> {
    if (runIds.length === 0) return new Set();
    const rows = await this.db.query<{ id: string }>(
      `WITH held AS (SELECT id FROM runs WHERE id = ANY($2::text[]) AND lease_owner = $1 AND status IN (${ACTIVE_STATUSES_SQL}) ORDER BY id FOR NO KEY UPDATE)
       UPDATE runs SET lease_expires_at = $3 FROM held WHERE runs.id = held.id RETURNING runs.id`,
      [this.instance, runIds, until],
      { prepared: true },
    );
    return new Set(rows.map((r) => r.id));
  }

  /** What the run's driver waits on, in one read: its calls' and approvals' answers and a cancel. */
  async inputs(runId: string): Promise<RunInputs> {
    const rows = await this.db.query<{ cancel_requested_at: Date | null; cancel_reason: string | null; budget: RunInputs["budget"]; tool_calls: AnsweredCall[] | null; approvals: AnsweredApproval[] | null; messages: PendingMessage[] | null }>(
      `SELECT r.cancel_requested_at, r.cancel_reason, COALESCE(r.budget, r.request->'budget') AS budget,
              (SELECT jsonb_agg(jsonb_build_object('message_id', m.message_id, 'content', m.content) ORDER BY m.created_at, m.message_id) FROM run_user_messages m WHERE m.run_id = r.id AND m.delivered_seq IS NULL) AS messages,
              (SELECT jsonb_agg(jsonb_build_object('call_id', t.call_id, 'result', t.result, 'is_error', t.is_error, 'answered', t.answered_at IS NOT NULL, 'deadline_at', t.deadline_at)) FROM tool_calls t WHERE t.run_id = r.id) AS tool_calls,
              (SELECT jsonb_agg(jsonb_build_object('approval_id', a.approval_id, 'request', a.request, 'decision', a.decision, 'reason', a.reason, 'answered', a.answered_at IS NOT NULL, 'deadline_at', a.deadline_at)) FROM approvals a WHERE a.run_id = r.id) AS approvals
         FROM runs r WHERE r.id = $1`,
      [runId],
      { prepared: true },
    );
    const r = rows[0];
    return {
      cancel: r?.cancel_requested_at ? { reason: r.cancel_reason } : null,
      budget: r?.budget ?? null,
      toolCalls: new Map((r?.tool_calls ?? []).map((c) => [c.call_id, c])),
      approvals: new Map((r?.approvals ?? []).map((a) => [a.approval_id, a])),
      messages: r?.messages ?? [],
    };
  }

  /**
   * A user message for a run that works (steering), kept until its driver hands it to the agent. Only a run of this
   * tenant that is active; the driver elsewhere is woken by the statement itself (`wake`: its payload). Null: not taken
   * (the run ended, or is not this tenant's).
   */
  async addMessage(tenant: Tenant, runId: string, messageId: string, content: string, now: Date): Promise<{ status: string; agent: boolean } | null> {
    const rows = await this.db.query<{ status: string; agent: boolean }>(
      `WITH r AS (SELECT id, app_id, environment, status::text AS status, request->>'runtimeKind' = 'agent' AS agent FROM runs
                   WHERE id = $1 AND app_id = $2 AND environment = $3::"Environment" AND source = 'runs' AND status IN (${ACTIVE_STATUSES_SQL}) FOR UPDATE),
            m AS (INSERT INTO run_user_messages (run_id, app_id, environment, message_id, content, created_at)
                  SELECT id, app_id, environment, $4, $5, $6 FROM r RETURNING 1)
       SELECT r.status, COALESCE(r.agent, false) AS agent FROM r, m`,
      [runId, tenant.appId, tenant.environment, messageId, content, now],
    );
    return rows[0] ?? null;
  }

  /** An agent run's CLI session, changed by its driver (a session begun afresh after the previous one was lost): what a follow-up of it resumes. */
  async setSession(runId: string, session: { id: string; resume: boolean }): Promise<void> {
    await this.db.query(`UPDATE runs SET request = jsonb_set(request, '{session}', $2::jsonb) WHERE id = $1 AND lease_owner = $3`, [runId, JSON.stringify(session), this.instance]);
  }

  /** The conversation up to a run (`conversations.ts` `historyOf`). */
  history(runId: string): Promise<ChatMessage[]> {
    return historyOf(this.db, runId);
  }

  /** The run's limits now (its user's window and plan, its own ledger sums, its budget): one statement. */
  limits(runId: string, period: string): Promise<LimitsRead | null> {
    return readLimits(this.db, runId, period);
  }

  /** A run's last pause, as its `run_paused` event said it: the limit, and the plan window it began in. */
  async lastPause(runId: string): Promise<{ limit: Limit; period: string } | null> {
    const rows = await this.db.query<{ limit: Limit; period: string }>(
      `SELECT d->>'limit' AS limit, d->'allowance'->>'period' AS period FROM (
         SELECT COALESCE(r.pause, (SELECT data FROM run_events WHERE run_id = r.id AND kind = 'run_paused' ORDER BY seq DESC LIMIT 1)) AS d FROM runs r WHERE r.id = $1) p
        WHERE d IS NOT NULL`,
      [runId],
    );
    return rows[0] ?? null;
  }

  /**
   * Gives up the lease at once (the machine moved, or its link was lost): the
   * instance holding its connection takes the run over, now or when it comes back.
   * The lease ends `now`, the moment from which the run waits for its machine.
   */
  async release(runId: string, now: Date): Promise<void> {
    await this.db.query(`UPDATE runs SET lease_owner = NULL, lease_expires_at = $3 WHERE id = $1 AND lease_owner = $2`, [runId, this.instance, now], { prepared: true });
  }

  /**
   * A page of stored events after `after`, in order: at most `limit` events and,
   * past the first, about `maxBytes` of their data as stored (a stream's catch-up
   * holds one page at a time). `more`: events after the page are stored already.
   */
  async eventPage(runId: string, after: number, limit: number, maxBytes: number): Promise<{ events: StoredEvent[]; more: boolean }> {
    const run = await this.streamed?.row(runId);
    if (run) {
      const events = after >= run.last_seq ? [] : await this.streamed!.range(runId, run, after, Math.min(run.last_seq, after + limit), maxBytes);
      if (events) return { events, more: (events.at(-1)?.seq ?? after) < run.last_seq };
    }
    const rows = await this.db.query<StoredEvent & { fetched: number }>(
      `SELECT seq, kind, data, fetched FROM (
         SELECT seq, kind, data, row_number() OVER w AS n, count(*) OVER ()::int AS fetched,
                sum(pg_column_size(data)) OVER w - pg_column_size(data) AS before
           FROM (SELECT seq, kind, data FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3 + 1) e
         WINDOW w AS (ORDER BY seq)) p
        WHERE n <= $3 AND (n = 1 OR before < $4) ORDER BY seq`,
      [runId, after, limit, maxBytes],
      { prepared: true },
    );
    const more = rows.length > 0 && Number(rows[0].fetched) > rows.length;
    return { events: rows.map(({ seq, kind, data }) => ({ seq, kind, data })), more };
  }

  /** Whether a run is still active, and its last stored event (a finished run's last event is its final one). */
  async runEnd(runId: string): Promise<{ active: boolean; last: StoredEvent | null }> {
    // On the bus the last event is on the run's row (its last step's events, `outbox`).
    const rows = await this.db.query<{ active: boolean; seq: number | null; kind: RunEvent["kind"] | null; data: RunEvent | null }>(
      `SELECT r.status IN (${ACTIVE_STATUSES_SQL}) AS active, COALESCE(e.seq, (o.e->>'seq')::int) AS seq, COALESCE(e.kind, o.e->>'kind') AS kind, COALESCE(e.data, o.e->'data') AS data
         FROM runs r
         LEFT JOIN LATERAL (SELECT seq, kind, data FROM run_events WHERE NOT r.events_in_stream AND run_id = r.id ORDER BY seq DESC LIMIT 1) e ON true
         LEFT JOIN LATERAL (SELECT r.outbox->-1 AS e WHERE r.events_in_stream) o ON true
        WHERE r.id = $1`,
      [runId],
      { prepared: true },
    );
    const r = rows[0];
    if (!r) return { active: false, last: null };
    return { active: r.active, last: r.seq === null ? null : { seq: r.seq, kind: r.kind!, data: r.data! } };
  }

  /** On the run bus: wakes the run's driver on its instance (named by the answer's statement), with the answer. */
  private wakeDriver(owner: string | null | undefined, wake: string | null): void {
    if (this.stream && owner && wake && owner !== this.instance) this.stream.signal(owner, "input", wake);
  }

  /** The instance driving a run now (its lease's holder), or null. */
  async driverOf(runId: string): Promise<string | null> {
    const rows = await this.db.query<{ owner: string | null }>(`SELECT lease_owner AS owner FROM runs WHERE id = $1`, [runId]);
    return rows[0]?.owner ?? null;
  }

  /** Records a tool result once: false when there is no such open call of this tenant's active run. `wake`: see `WAKE_DRIVER`. */
  async answerToolCall(t: Tenant, runId: string, callId: string, result: unknown, isError: boolean, now: Date, user: string | undefined, wake: string | null): Promise<boolean> {
    const rows = await this.db.query<{ owner?: string | null }>(
      `WITH a AS (UPDATE tool_calls SET result = $5::jsonb, is_error = $6, answered_at = $7
        WHERE run_id = $1 AND app_id = $2 AND environment = $3::"Environment" AND call_id = $4 AND answered_at IS NULL
          AND ${ACTIVE_RUN_OF_USER}
      RETURNING 1)
      SELECT ${this.stream ? DRIVER_OF_RUN : WAKE_DRIVER} FROM a`,
      [runId, t.appId, t.environment, callId, JSON.stringify(result ?? null), isError, now, user ?? null, wake],
      { prepared: true },
    );
    this.wakeDriver(rows[0]?.owner, wake);
    return rows.length === 1;
  }

  /**
   * Records an approval decision once: false when there is no such open approval of this tenant's active run.
   * Who decided is kept: the user the app answered for, else `app`. `wake`: see `WAKE_DRIVER`.
   */
  async answerApproval(t: Tenant, runId: string, approvalId: string, decision: ApprovalDecision, reason: string | null, now: Date, user: string | undefined, wake: string | null): Promise<boolean> {
    const rows = await this.db.query<{ owner?: string | null }>(
      `WITH a AS (UPDATE approvals SET decision = $5, reason = $6, answered_at = $7, decided_by = COALESCE($8, 'app')
        WHERE run_id = $1 AND app_id = $2 AND environment = $3::"Environment" AND approval_id = $4 AND answered_at IS NULL
          AND ${ACTIVE_RUN_OF_USER}
      RETURNING 1)
      SELECT ${this.stream ? DRIVER_OF_RUN : WAKE_DRIVER} FROM a`,
      [runId, t.appId, t.environment, approvalId, decision, reason, now, user ?? null, wake],
      { prepared: true },
    );
    this.wakeDriver(rows[0]?.owner, wake);
    return rows.length === 1;
  }

  /**
   * The agent on the user's machine withdrew its permission request (the end user
   * answered it there): the approval is closed as `withdrawn`, decided by `machine`,
   * unless the app answered it first.
   */
  async withdrawApproval(runId: string, approvalId: string, now: Date): Promise<void> {
    await this.db.query(
      `UPDATE approvals SET decision = 'withdrawn', decided_by = 'machine', answered_at = $3 WHERE run_id = $1 AND approval_id = $2 AND answered_at IS NULL`,
      [runId, approvalId, now],
      { prepared: true },
    );
  }
}
