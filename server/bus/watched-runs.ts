import type { Sql } from "../db/open.js";
import type { Logger } from "../logger.js";
import { isDatabaseUnavailable } from "../db/outage.js";
import type { RemoteEvents } from "../runs/bus.js";

/**
 * While an instance whose `server_instances.marks_watched_runs` is false (a version before the
 * marks, during a rolling upgrade) wrote its `alive_at` within this long, every stored step is
 * announced, as that version's readers expect (instances beat every 10 s at most).
 */
export const UNMARKED_INSTANCE_ALIVE_SECONDS = 60;

/** A mark that met the database away is tried again after this long (its readers read meanwhile, as they do then). */
const RETRY_MS = 1000;

/**
 * Postgres alone (no run bus): how a reader here of a run driven on another instance hears
 * of its steps. A step's writer announces it (`NOTIFY svc_run_event`, which the engine hands
 * to the readers here) only for a run marked `watched_elsewhere`; marking is this. The mark
 * is an UPDATE of the run's row, which the writer's statement locks: a step committed before
 * the mark is in the rows the readers read once it is made (`onReady`), and every step
 * after it is announced. The mark stays for the run's life (another reader elsewhere, or
 * the driver moving, needs it again); a run never read away from its driver is never
 * marked, and its steps notify nobody.
 */
export class WatchedRuns implements RemoteEvents {
  private readonly marking = new Map<string, NodeJS.Timeout | null>();

  constructor(
    private readonly sql: Sql,
    private readonly log: Logger,
  ) {}

  /** Marks the run; `onReady` once marked (or the database is away: the readers read anyway, and again once it is marked). Its events come with the notifications, not here. */
  watch(runId: string, _onEvent: unknown, onReady: () => void): void {
    if (this.marking.has(runId)) return;
    this.marking.set(runId, null);
    const mark = () => {
      // A finished run stores nothing more: read again (its history, say), it is not marked.
      this.sql.query(`UPDATE runs SET watched_elsewhere = true WHERE id = $1 AND NOT watched_elsewhere AND finished_at IS NULL`, [runId], { prepared: true }).then(
        () => {
          if (!this.marking.has(runId)) return;
          this.marking.delete(runId);
          onReady();
        },
        (err: unknown) => {
          if (!this.marking.has(runId)) return;
          if (!isDatabaseUnavailable(err)) this.log.warn({ err, runId }, "could not mark a run as read here");
          onReady();
          const retry = setTimeout(mark, RETRY_MS);
          retry.unref();
          this.marking.set(runId, retry);
        },
      );
    };
    mark();
  }

  /** The last reader here left: a mark not made yet is not tried again. */
  unwatch(runId: string): void {
    const retry = this.marking.get(runId);
    if (retry) clearTimeout(retry);
    this.marking.delete(runId);
  }
}
