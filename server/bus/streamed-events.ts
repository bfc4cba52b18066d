import type { Database } from "../db/open.js";
import type { RunRow, StoredEvent } from "../runs/run-rows.js";
import { BusUnavailable, type RunStream, type TimedEvent } from "./run-stream.js";

/** A compaction moves this many events from the stream to `run_events` per statement. */
const COMPACT_PAGE = 500;

/**
 * A run's events while they are on the run bus (`NATS_URL`), and their way into Postgres: published
 * after each step's commit (the next step waits for it), published again by a takeover, read back
 * (its last step's from the run's row, `outbox`, the rest from the stream), and compacted into
 * `run_events` at the run's end. `RunStore` uses it for every run whose row says its events are in
 * the stream (`events_in_stream`).
 */
export class StreamedEvents {
  /** Runs whose last step's events are being published. */
  private readonly appending = new Map<string, Promise<void>>();

  constructor(
    private readonly db: Database,
    readonly stream: RunStream,
  ) {}

  /** A step's events, committed: published now, and the run's next step waits for it (`published`). */
  committed(runId: string, events: StoredEvent[]): void {
    const p: Promise<void> = this.stream
      .append(runId, events)
      .catch(() => {}) // closing: the instance taking the run over publishes them
      .finally(() => this.appending.get(runId) === p && this.appending.delete(runId));
    this.appending.set(runId, p);
  }

  /** Resolves once the run's last step written here is stored on the stream. */
  published(runId: string): Promise<void> {
    return this.appending.get(runId) ?? Promise.resolve();
  }

  /** The run's row as a read of the stream needs it: its last seq and last step's events; null when its events are in `run_events`. */
  async row(runId: string): Promise<StreamedRow | null> {
    const rows = await this.db.query<StreamedRow>(`SELECT last_seq, outbox FROM runs WHERE id = $1 AND events_in_stream`, [runId], { prepared: true });
    return rows[0] ?? null;
  }

  /**
   * A run taken over on the bus: its last step's events (on its row) are published, in case its
   * driver died between that step's commit and its publish (a publish made already is the same
   * event again: nothing doubles). Before the new driver's first write replaces them.
   */
  async republish(run: Pick<RunRow, "id">): Promise<void> {
    const rows = await this.db.query<{ outbox: StoredEvent[] | null }>(`SELECT outbox FROM runs WHERE id = $1 AND events_in_stream`, [run.id]);
    const outbox = rows[0]?.outbox;
    if (outbox?.length) await this.stream.append(run.id, outbox);
  }

  /**
   * Moves a finished run's events from the stream into `run_events` (a page at a time,
   * each insert idempotent), marks the run as stored there, then purges its subjects.
   * A run still active, or stored there already, is left as it is. False: the stream
   * lacked an event (a later sweep tries again).
   */
  async compact(runId: string, remembered: { e: StoredEvent; at: Date }[] | null = null): Promise<boolean> {
    await this.published(runId);
    // Every event of the run still in its driver's memory (most runs): one statement, nothing read back from the stream.
    if (remembered) {
      const events = remembered.map(({ e, at }) => ({ seq: e.seq, kind: e.kind, data: e.data, at }));
      const done = await this.db.query(
        `WITH r AS (SELECT id, app_id, environment FROM runs WHERE id = $1 AND events_in_stream AND finished_at IS NOT NULL AND last_seq = $3 FOR NO KEY UPDATE),
              ev AS (INSERT INTO run_events (run_id, app_id, environment, seq, kind, data, created_at)
                SELECT r.id, r.app_id, r.environment, e.seq, e.kind, e.data, e.at FROM r, jsonb_to_recordset($2::jsonb) AS e(seq int, kind text, data jsonb, at timestamptz)
                ON CONFLICT DO NOTHING)
         UPDATE runs SET events_in_stream = false, outbox = NULL FROM r WHERE runs.id = r.id RETURNING 1`,
        [runId, JSON.stringify(events), events.length],
      );
      if (done.length === 1) {
        await this.stream.purge(runId).catch(() => {});
        return true;
      }
    }
    const rows = await this.db.query<{ last_seq: number; outbox: StoredEvent[] | null }>(
      `SELECT last_seq, outbox FROM runs WHERE id = $1 AND events_in_stream AND finished_at IS NOT NULL`,
      [runId],
    );
    const run = rows[0];
    if (!run) return true;
    const outbox = new Map<number, TimedEvent>((run.outbox ?? []).map((e) => [e.seq, e]));
    for (let from = 1; from <= run.last_seq; from += COMPACT_PAGE) {
      const to = Math.min(run.last_seq, from + COMPACT_PAGE - 1);
      const got = await this.stream.read(runId, from, to);
      const events: TimedEvent[] = [];
      for (let seq = from; seq <= to; seq++) {
        const e = got[seq - from] ?? outbox.get(seq);
        if (!e) return false;
        events.push({ seq, kind: e.kind, data: e.data, at: e.at });
      }
      await this.db.query(
        `INSERT INTO run_events (run_id, app_id, environment, seq, kind, data, created_at)
         SELECT r.id, r.app_id, r.environment, e.seq, e.kind, e.data, COALESCE(e.at, r.finished_at, now())
           FROM runs r, jsonb_to_recordset($2::jsonb) AS e(seq int, kind text, data jsonb, at timestamptz) WHERE r.id = $1
         ON CONFLICT DO NOTHING`,
        [runId, JSON.stringify(events)],
      );
    }
    await this.db.query(`UPDATE runs SET events_in_stream = false, outbox = NULL WHERE id = $1`, [runId]);
    await this.stream.purge(runId).catch(() => {}); // left behind: replaced or purged by a later compaction's purge of the same run
    return true;
  }

  /** Finished runs whose events are still in the stream (their driver died before compacting them), oldest first. */
  async uncompacted(before: Date, limit: number): Promise<string[]> {
    const rows = await this.db.query<{ id: string }>(`SELECT id FROM runs WHERE events_in_stream AND finished_at < $1 ORDER BY finished_at LIMIT $2`, [before, limit]);
    return rows.map((r) => r.id);
  }

  /**
   * All of a run's events while they are in the stream (its last step's from its row); null when they are in
   * `run_events`. Read at a takeover (`RunStore.streamedText`, `restarts`) and by an inspection of a live run.
   */
  async all(runId: string, max = Number.MAX_SAFE_INTEGER): Promise<TimedEvent[] | null> {
    const run = await this.row(runId);
    if (!run) return null;
    return this.range(runId, run, 0, Math.min(run.last_seq, max), Number.MAX_SAFE_INTEGER);
  }

  /** Events after `after` up to `to` of a run on the stream (its last step's from its row), about `maxBytes` of them; null: compacted meanwhile. */
  async range(runId: string, run: StreamedRow, after: number, to: number, maxBytes: number): Promise<TimedEvent[] | null> {
    const outbox = new Map((run.outbox ?? []).map((e) => [e.seq, e]));
    const firstOutbox = run.outbox?.[0]?.seq ?? to + 1;
    const got = after + 1 <= Math.min(to, firstOutbox - 1) ? await this.stream.read(runId, after + 1, Math.min(to, firstOutbox - 1)) : [];
    const events: TimedEvent[] = [];
    let bytes = 0;
    for (let seq = after + 1; seq <= to && (events.length === 0 || bytes < maxBytes); seq++) {
      const e = outbox.get(seq) ?? got[seq - after - 1];
      if (!e) {
        // Not in the stream: compacted (and purged) since the row was read, or NATS lost it.
        const still = await this.db.query(`SELECT 1 FROM runs WHERE id = $1 AND events_in_stream`, [runId]);
        if (still.length === 0) return null;
        throw new BusUnavailable(`event ${seq} of run ${runId} is not in the stream yet`);
      }
      events.push(e);
      bytes += Buffer.byteLength(JSON.stringify(e.data));
    }
    return events;
  }
}

/** What a read of a run's events on the stream needs of its row. */
export interface StreamedRow {
  last_seq: number;
  outbox: StoredEvent[] | null;
}
