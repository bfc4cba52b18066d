import type { Database } from "../db/open.js";
import { overageMicrosSql } from "../ledger/functions.js";
import { STORED_CONVERSATION_SQL, type Writes } from "./run-rows.js";
import { NOTICE_EVENTS_BYTES } from "./notices.js";
import { UNMARKED_INSTANCE_ALIVE_SECONDS } from "../bus/watched-runs.js";

/** Tells every instance of a stored step, for its readers there (payload: `<run id> <writing instance>[ <events>]`, `notices.ts`). */
export const RUN_EVENT_CHANNEL = "svc_run_event";

/** One run's step, waiting for the next group commit. */
interface Step {
  runId: string;
  endUserId: string;
  now: Date;
  w: Writes;
  resolve: (written: Written) => void;
  reject: (err: unknown) => void;
}

/** How a step went: `owned`, written (false: the lease was lost, nothing written); `streamed`, its events go to the run bus (`runs.outbox` holds them until published). */
export interface Written {
  owned: boolean;
  streamed: boolean;
}

/** The most steps one statement carries. */
const MAX_BATCH = 64;

/**
 * The steps of the runs driven on this instance (their events, the calls,
 * approvals and ledger rows they announce, their patches), written by group
 * commit: steps arriving together go in one statement, each only while this
 * instance holds its run's lease (the rows are locked for it, `FOR NO KEY UPDATE`
 * as the row's own update locks it: a takeover waits, then sees everything
 * written, while the key checks of rows naming the run do not wait). Each driver is answered once its step
 * is committed: owned, or not (the lease was lost and nothing was written).
 *
 * A few statements may be in flight at once (Postgres), but a user's
 * ledger-writing steps are in one statement in flight at a time (statements
 * pricing overage lock their users' rows: two with the same users could lock
 * them in opposite orders). A ledger row's overage is figured against every
 * earlier row of that user: those stored, and those before it in the same
 * statement, so a user running many runs at once has all of their waiting
 * steps in one statement, not one statement each. A driver has one step in
 * flight, so a run has at most one step per batch. A step with events is written once: when
 * its first event is stored already (the same step sent again after its
 * commit's answer was lost to an outage) nothing is written again and it counts
 * as written. A batch that fails is written again step by step, so one bad step
 * fails only its own driver.
 */
export class RunWriter {
  private queue: Step[] = [];
  private scheduled = false;
  private inFlight = 0;
  /** End users with a ledger row in a statement in flight: their next one waits for it. */
  private readonly billing = new Set<string>();
  /** The one statement of a batch: its text made once (it is prepared by it). */
  private readonly sql: string;

  constructor(
    private readonly db: Database,
    private readonly instance: string,
    /** Statements in flight at once (Postgres: a few connections; PGlite: one, it runs one at a time anyway). */
    /** Run events go to NATS JetStream (`RunStream`), not to `run_events`. */
    bus = false,
    private readonly maxInFlight = db.kind === "postgres" ? 4 : 1,
  ) {
    this.sql = stepStatement(db.kind, bus);
  }

  write(runId: string, endUserId: string, now: Date, w: Writes): Promise<Written> {
    return new Promise<Written>((resolve, reject) => {
      this.queue.push({ runId, endUserId, now, w, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        // One turn of the event loop: the steps made in it join the statement.
        setImmediate(() => {
          this.scheduled = false;
          this.pump();
        });
      }
    });
  }

  /** Sends batches while there are steps and room: each takes the steps waiting, but none of a user whose ledger rows are in a statement in flight. */
  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const users = new Set<string>();
      const batch: Step[] = [];
      const later: Step[] = [];
      for (const s of this.queue) {
        const bills = (s.w.usage?.length ?? 0) > 0;
        if (batch.length < MAX_BATCH && !(bills && this.billing.has(s.endUserId))) {
          if (bills) users.add(s.endUserId);
          batch.push(s);
        } else later.push(s);
      }
      if (batch.length === 0) return;
      this.queue = later;
      for (const u of users) this.billing.add(u);
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        for (const u of users) this.billing.delete(u);
        this.pump();
      });
    }
  }

  private async send(batch: Step[]): Promise<void> {
    try {
      const owned = await this.statement(batch);
      for (const s of batch) s.resolve(writtenOf(owned, s.runId));
    } catch (err) {
      if (batch.length === 1) batch[0].reject(err);
      else for (const s of batch) await this.statement([s]).then((owned) => s.resolve(writtenOf(owned, s.runId)), s.reject);
    }
  }

  /** The steps in one statement; the runs whose lease this instance holds, each with whether its events are streamed. */
  private async statement(steps: Step[]): Promise<Map<string, boolean>> {
    const now = steps.reduce((t, s) => (s.now > t ? s.now : t), steps[0].now);
    const rows = steps.map(({ runId, w }, ord) => {
      const p = w.patch ?? {};
      return {
        run_id: runId,
        ord,
        first_seq: w.events?.[0]?.seq ?? null,
        last_seq: w.events?.at(-1)?.seq ?? null,
        status: p.status ?? null,
        turns: p.turns ?? null,
        transcript_add: p.transcript?.messages.length ? p.transcript.messages.map((message, i) => ({ n: p.transcript!.from + i, message })) : null,
        agent_state: p.agentState ?? null,
        output: p.output ?? null,
        add_in: p.addInputTokens ?? 0,
        add_out: p.addOutputTokens ?? 0,
        stop_reason: p.stopReason ?? null,
        error: p.error ?? null,
        finished: p.finished === true,
        pause: p.pause ?? null,
        events: w.events?.length ? w.events : null,
        tool_calls: w.toolCalls?.length ? w.toolCalls : null,
        approvals: w.approvals?.length ? w.approvals : null,
        usage: w.usage?.length ? w.usage.map((u, n) => ({ ...u, n })) : null,
        delivered: w.delivered?.length ? w.delivered : null,
      };
    });
    const result = await this.db.query<{ id: string; streamed: boolean }>(
      this.sql,
      // The run ids apart ($4): the rows are found by their key in any plan (a generic plan over `IN (SELECT … FROM x)` scanned the table).
      // The statement reads them through a sub-select, so no plan knows how many there are: see `stepStatement`.
      [JSON.stringify(rows), this.instance, now, steps.map((s) => s.runId)],
      { prepared: true },
    );
    return new Map(result.map((r) => [r.id, r.streamed]));
  }
}

const writtenOf = (owned: Map<string, boolean>, runId: string): Written => ({ owned: owned.has(runId), streamed: owned.get(runId) === true });

/** True while an instance of a version without `mark` (a column of `server_instances`) is alive: a rolling upgrade's older instances. */
const unmarked = (mark: string) =>
  `EXISTS (SELECT 1 FROM server_instances si WHERE NOT si.${mark} AND si.alive_at > $3::timestamptz - interval '${UNMARKED_INSTANCE_ALIVE_SECONDS} seconds')`;

/**
 * The statement writing a batch of steps ($1 the steps as JSON, $2 this instance, $3 now, $4 the run ids).
 * `bus`: a run's events go to the run bus, published once this commits; the statement keeps the step's
 * events on the run's row (`outbox`, replacing the step before's, published already) and neither
 * inserts them nor notifies. A run begun before the bus was configured (events stored in Postgres
 * already) keeps them there to its end.
 */
function stepStatement(kind: Database["kind"], bus: boolean): string {
  // Readers on other instances learn of new events by a notification (Postgres only: an embedded
  // database has one instance, whose readers hear the driver directly). The payload names the
  // writer, whose own readers heard the events already, and carries the events when they are
  // short (`notices.ts`), so the readers elsewhere need not read them back.
  const payload = `r.id || ' ' || $2 || CASE WHEN octet_length(r.events::text) <= ${NOTICE_EVENTS_BYTES} THEN ' ' || r.events::text ELSE '' END`;
  // Only a run read elsewhere is announced (`watched_elsewhere`, marked by that reader's instance, server/bus/watched-runs.ts):
  // a transaction that notifies commits under a database-wide lock, so announcing every step made the steps' commits go one
  // at a time. The mark is an UPDATE of the run's row, which `o` locks: a mark committed before this statement locked the
  // row is seen here (read committed reads a locked row's latest version), and one after it waits for this commit, then its
  // reader reads what this stored. While an instance of a version before the marks is alive, every step is announced.
  const announced = `(o.watched_elsewhere OR ${unmarked("marks_watched_runs")})`;
  const notify = kind === "postgres" ? `(SELECT pg_notify('${RUN_EVENT_CHANNEL}', ${payload}) FROM r WHERE r.id = o.id AND r.events IS NOT NULL AND NOT r.streamed AND ${announced})` : "NULL";
  const streamed = bus ? "(o.events_in_stream OR o.stored_seq = 0)" : "false";
  // `ANY((SELECT $4))`, not `ANY($4)`: a custom plan (one made for the values given) saw a step of one run as cheaper
  // than the generic plan's guess of ten, so Postgres planned this statement again at every write (≈ 1 ms each, 60 %
  // of the writes under 1,000 streams, all of them one run at a time). Hidden from both, the generic plan is kept.
  // Its rows are still found by their key (an index condition on the sub-select's value).
  return `WITH x AS (
         SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(run_id text, ord int, first_seq int, last_seq int, status text, turns int, transcript_add jsonb, agent_state jsonb, output text,
           add_in bigint, add_out bigint, stop_reason text, error jsonb, finished boolean, pause jsonb, events jsonb, tool_calls jsonb, approvals jsonb, usage jsonb, delivered jsonb)),
       o AS (SELECT id, app_id, environment, end_user_id, last_seq AS stored_seq, events_in_stream, watched_elsewhere FROM runs
              WHERE id = ANY((SELECT $4::text[])::text[]) AND lease_owner = $2 ORDER BY id FOR NO KEY UPDATE),
       r AS (SELECT o.id, o.app_id, o.environment, o.end_user_id, ${streamed} AS streamed, x.* FROM o JOIN x ON x.run_id = o.id
              WHERE x.first_seq IS NULL OR o.stored_seq < x.first_seq),
       ev AS (INSERT INTO run_events (run_id, app_id, environment, seq, kind, data, created_at)
         SELECT r.id, r.app_id, r.environment, e.seq, e.kind, e.data, $3 FROM r, jsonb_to_recordset(r.events) AS e(seq int, kind text, data jsonb) WHERE NOT r.streamed RETURNING 1),
       tc AS (INSERT INTO tool_calls (run_id, app_id, environment, call_id, name, arguments, deadline_at, created_at)
         SELECT r.id, r.app_id, r.environment, t.call_id, t.name, t.arguments, t.deadline_at, $3
           FROM r, jsonb_to_recordset(r.tool_calls) AS t(call_id text, name text, arguments jsonb, deadline_at timestamptz)
         ON CONFLICT DO NOTHING RETURNING 1),
       ap AS (INSERT INTO approvals (run_id, app_id, environment, approval_id, kind, request, deadline_at, created_at)
         SELECT r.id, r.app_id, r.environment, a.approval_id, a.kind, a.request, a.deadline_at, $3
           FROM r, jsonb_to_recordset(r.approvals) AS a(approval_id text, kind text, request jsonb, deadline_at timestamptz)
         ON CONFLICT DO NOTHING RETURNING 1),
       dm AS (UPDATE run_user_messages m SET delivered_at = $3, delivered_seq = d.seq
           FROM r, jsonb_to_recordset(r.delivered) AS d(message_id text, seq int)
          WHERE m.run_id = r.id AND m.message_id = d.message_id AND m.delivered_seq IS NULL RETURNING 1),
       tm AS (INSERT INTO run_messages (run_id, app_id, environment, n, message)
         SELECT r.id, r.app_id, r.environment, t.n, t.message FROM r, jsonb_to_recordset(r.transcript_add) AS t(n int, message jsonb)
         ON CONFLICT DO NOTHING RETURNING 1),
       -- In order (the statement's steps, each step's rows): svc_overage_micros is VOLATILE, so each call sees the rows this
       -- statement inserted before it (SPI's read-write visibility), and a user's rows are priced as one after another.
       ur AS (INSERT INTO usage_rows (app_id, environment, end_user_id, run_id, cost_class, kind, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, amount_micros, period, unique_key, created_at)
         SELECT r.app_id, r.environment, r.end_user_id, r.id, u.cost_class::"CostClass", u.kind, u.input_tokens, u.output_tokens, COALESCE(u.cache_read_tokens, 0), COALESCE(u.cache_write_tokens, 0),
                u.amount_micros + ${overageMicrosSql({ app: "r.app_id", environment: "r.environment", user: "r.end_user_id", period: "u.period", tokens: "u.input_tokens + COALESCE(u.cache_read_tokens, 0) + COALESCE(u.cache_write_tokens, 0) + u.output_tokens" })}, u.period, u.unique_key, $3
           FROM r, jsonb_to_recordset(r.usage) AS u(n int, cost_class text, kind text, input_tokens bigint, output_tokens bigint, cache_read_tokens bigint, cache_write_tokens bigint, amount_micros bigint, period text, unique_key text)
          ORDER BY r.ord, u.n
         ON CONFLICT (app_id, environment, unique_key) DO NOTHING RETURNING 1),
       up AS (UPDATE runs SET
           last_seq = GREATEST(runs.last_seq, COALESCE(r.last_seq, runs.last_seq)),
           status = COALESCE(r.status::"RunStatus", runs.status),
           -- Paused since the write that paused it; any other status written ends the pause.
           paused_at = CASE WHEN r.status = 'paused' THEN COALESCE(runs.paused_at, $3) WHEN r.status IS NOT NULL THEN NULL ELSE runs.paused_at END,
           turns = COALESCE(r.turns, runs.turns),
           -- The whole conversation on the row too only for a run that has it there already, or while an instance of a
           -- version before run_messages is alive (it reads it there): svc_transcript_append adds the messages it lacks.
           transcript = CASE WHEN r.transcript_add IS NULL OR (runs.transcript IS NULL AND NOT ${unmarked("stores_run_messages")}) THEN runs.transcript
             ELSE svc_transcript_append(${STORED_CONVERSATION_SQL}, r.transcript_add) END,
           agent_state = COALESCE(r.agent_state, runs.agent_state),
           output = COALESCE(r.output, runs.output),
           input_tokens = runs.input_tokens + r.add_in,
           output_tokens = runs.output_tokens + r.add_out,
           stop_reason = COALESCE(r.stop_reason, runs.stop_reason),
           error = COALESCE(r.error, runs.error),
           finished_at = CASE WHEN r.finished THEN $3 ELSE runs.finished_at END,
           lease_expires_at = CASE WHEN r.finished THEN NULL ELSE runs.lease_expires_at END,
           pause = COALESCE(r.pause, runs.pause),
           events_in_stream = r.streamed,
           outbox = CASE WHEN r.streamed AND r.events IS NOT NULL THEN r.events ELSE runs.outbox END
         FROM r WHERE runs.id = r.id RETURNING 1)
       SELECT o.id, ${streamed} AS streamed, ${notify} AS notified FROM o`;
}
