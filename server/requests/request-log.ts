import type { Environment } from "@svc/contract";
import type { Clock } from "../clock.js";
import type { Sql } from "../db/open.js";
import type { Logger } from "../logger.js";

/** How long requests gather before one statement writes them all. */
export const REQUEST_LOG_FLUSH_MS = 1000;
/** Requests held in memory at most (the database away, a flood): past it new ones are dropped, and counted. */
export const REQUEST_LOG_MAX_PENDING = 10_000;
/** Rows one statement writes at most (13 parameters each, far under Postgres's 65,535). */
const ROWS_PER_STATEMENT = 1000;
/** Rows one sweep deletes at most, so a sweep never holds a long lock. */
const SWEEP_BATCH = 5000;

/** One API request made with an app key, as the dashboard's request log shows it. */
export interface LoggedRequest {
  appId: string;
  environment: Environment;
  keyId: string;
  requestId: string;
  method: string;
  path: string;
  route: string;
  status: number;
  errorCode: string | null;
  durationMs: number;
  runId: string | null;
  user: string | null;
  at: Date;
}

/**
 * The app's request log (`api_requests`): every request made with an app key, written
 * in batches (one statement a second at most, whatever the rate), like heartbeats. A
 * request is never slowed by it: it is recorded when its answer has gone. What a write
 * meets (the database away) is kept and tried again at the next flush, up to
 * `REQUEST_LOG_MAX_PENDING` rows in memory; past that, rows are dropped and counted
 * (`dropped`), never the process's memory grown. Rows older than the retention are
 * deleted by a sweep, hourly per instance.
 */
export class RequestLog {
  private pending: LoggedRequest[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private stopped = false;
  private lastSweep = 0;
  /** Rows dropped because too many waited to be written. */
  dropped = 0;

  constructor(
    private readonly sql: Sql,
    private readonly clock: Clock,
    private readonly logger: Logger,
    /** Days rows are kept; 0: nothing is recorded. */
    readonly retentionDays: number,
    private readonly flushMs = REQUEST_LOG_FLUSH_MS,
  ) {}

  /** The service's clock (a test's clock in tests): what a request's time is read from. */
  now(): Date {
    return this.clock.now();
  }

  get enabled(): boolean {
    return this.retentionDays > 0;
  }

  record(r: LoggedRequest): void {
    if (!this.enabled || this.stopped) return;
    if (this.pending.length >= REQUEST_LOG_MAX_PENDING) {
      if (this.dropped++ === 0) this.logger.warn({ pending: this.pending.length }, "request log: too many requests waiting to be written; dropping until they are");
      return;
    }
    this.pending.push(r);
    this.schedule();
  }

  /** Writes what is pending now (tests, and the server's close). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.flushing) await this.flushing;
    if (this.pending.length > 0) await (this.flushing = this.write().finally(() => (this.flushing = null)));
  }

  /** Writes what is pending, then records nothing more. */
  async stop(): Promise<void> {
    await this.flush().catch((err) => this.logger.warn({ err }, "request log: the last rows could not be written"));
    this.stopped = true;
  }

  private schedule(): void {
    if (this.timer || this.flushing || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flushing = this.write()
        .catch((err) => this.logger.warn({ err: { message: (err as Error).message } }, "request log: write failed; retrying at the next flush"))
        .finally(() => {
          this.flushing = null;
          if (this.pending.length > 0) this.schedule();
        });
    }, this.flushMs);
    this.timer.unref();
  }

  private async write(): Promise<void> {
    this.sweepIfDue();
    while (this.pending.length > 0) {
      const batch = this.pending.slice(0, ROWS_PER_STATEMENT);
      const params: unknown[] = [];
      const rows = batch.map((r) => {
        const at = params.length;
        params.push(r.appId, r.environment, r.keyId, r.requestId, r.method, r.path.slice(0, 2048), r.route, r.status, r.errorCode, r.durationMs, r.runId, r.user, r.at);
        const n = (i: number) => `$${at + i}`;
        return `(${n(1)}, ${n(2)}::"Environment", ${[3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13].map(n).join(", ")})`;
      });
      await this.sql.query(
        `INSERT INTO api_requests (app_id, environment, key_id, request_id, method, path, route, status, error_code, duration_ms, run_id, "user", created_at) VALUES ${rows.join(", ")}`,
        params,
      );
      // Taken off only once written: a failed write leaves them for the next flush.
      this.pending.splice(0, batch.length);
      if (this.dropped > 0) {
        this.logger.warn({ dropped: this.dropped }, "request log: rows were dropped while the log could not keep up");
        this.dropped = 0;
      }
    }
  }

  /** Starts a sweep of rows past the retention, at most once an hour per instance. */
  private sweepIfDue(): void {
    const now = this.clock.now().getTime();
    if (now - this.lastSweep < 3_600_000) return;
    this.lastSweep = now;
    this.sweep(new Date(now - this.retentionDays * 86_400_000)).catch((err) => this.logger.warn({ err: { message: (err as Error).message } }, "request log: sweep failed"));
  }

  /** Deletes rows created before `before`, a batch at a time; how many. */
  async sweep(before: Date): Promise<number> {
    let total = 0;
    for (;;) {
      const deleted = await this.sql.query<{ id: string }>(
        `DELETE FROM api_requests WHERE id IN (SELECT id FROM api_requests WHERE created_at < $1 ORDER BY created_at LIMIT ${SWEEP_BATCH}) RETURNING id`,
        [before],
      );
      total += deleted.length;
      if (deleted.length < SWEEP_BATCH) return total;
    }
  }
}
