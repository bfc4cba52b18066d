import type { Logger } from "../logger.js";
import type { Sql } from "./open.js";

/** How often the embedded database's tables are looked at: autovacuum's own `autovacuum_naptime`. */
export const UPKEEP_EVERY_MS = 60_000;

/**
 * Postgres's autovacuum thresholds, at their defaults: a table is analysed once more than
 * `50 + 10 %` of its rows changed since its last analysis, vacuumed once more than `50 + 20 %`
 * are dead, or once more than `1,000 + 20 %` were inserted since its last vacuum (which keeps
 * an insert-only table's visibility map, and so its index-only scans, current).
 */
const THRESHOLDS = {
  analyze: { base: 50, share: 0.1 },
  vacuumDead: { base: 50, share: 0.2 },
  vacuumInserted: { base: 1000, share: 0.2 },
} as const;

/** What one pass did: the tables analysed and those vacuumed (vacuumed ones may be analysed too). */
export interface UpkeepPass {
  analyzed: string[];
  vacuumed: string[];
}

interface TableCounts {
  name: string;
  /** Never analysed nor vacuumed (`reltuples` -1, kept in the catalog), and not empty. */
  unknown: boolean;
  tuples: number;
  modified: number;
  dead: number;
  inserted: number;
}

/**
 * What autovacuum does for Postgres, done for the embedded database (PGlite runs no
 * autovacuum: it is one backend in this process). Without it no table ever has
 * statistics, and the planner cannot tell a run's key from an app's runs: the
 * foreign-key check of every row naming a run (its events, calls, messages, ledger
 * rows) read the app's whole index of runs by date, so each run cost more than the one
 * before it (2.3 ms a check at 6,000 runs, a few dozen checks a run). Dead rows were
 * never cleared either. Each pass reads the tables' counters and analyses or vacuums,
 * one table at a time, those past autovacuum's default thresholds, and analyses any
 * table with rows that never was (its counters may have been lost with a process that
 * did not close the database); on Postgres this is autovacuum's job and this is not
 * started.
 *
 * A table's statement waits behind the pass's (PGlite runs one statement at a time),
 * so a pass is short once the tables are current: each analysis reads a sample of at
 * most 30,000 rows, and a vacuum skips the pages unchanged since the last one.
 */
export class EmbeddedUpkeep {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;
  private stopped = false;

  constructor(
    private readonly sql: Sql,
    private readonly logger: Logger,
    private readonly everyMs = UPKEEP_EVERY_MS,
  ) {}

  /** A pass now (not awaited: a large data folder's first pass must not hold the start back), then one every `everyMs`. */
  start(): void {
    this.tick();
  }

  /** Waits for a pass under way; none starts after. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  private tick(): void {
    if (this.stopped) return;
    this.running = this.pass()
      .then((done) => {
        if (done.analyzed.length || done.vacuumed.length) this.logger.debug(done, "embedded database: tables analysed and vacuumed");
      })
      .catch((err) => this.logger.warn({ err: { message: (err as Error).message } }, "embedded database: upkeep failed; trying again at the next pass"))
      .finally(() => {
        this.running = null;
        if (this.stopped) return;
        this.timer = setTimeout(() => this.tick(), this.everyMs);
        this.timer.unref();
      });
  }

  /** One pass: every table past a threshold analysed or vacuumed (or both), one statement each. */
  async pass(): Promise<UpkeepPass> {
    // The counters as of now: a backend reports its own at most once a second otherwise.
    await this.sql.query(`SELECT pg_stat_force_next_flush()`);
    const tables = await this.sql.query<TableCounts>(
      `SELECT s.relname AS name, c.reltuples < 0 AND pg_relation_size(s.relid) > 0 AS unknown, GREATEST(c.reltuples, 0)::float8 AS tuples, s.n_mod_since_analyze::float8 AS modified,
              s.n_dead_tup::float8 AS dead, s.n_ins_since_vacuum::float8 AS inserted
         FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
        WHERE s.schemaname = 'public' ORDER BY s.relname`,
    );
    const done: UpkeepPass = { analyzed: [], vacuumed: [] };
    for (const t of tables) {
      if (this.stopped) break;
      const past = (th: { base: number; share: number }, n: number) => n > th.base + th.share * Number(t.tuples);
      // The counters start again from nothing when PGlite was not closed cleanly: a table that has rows and was
      // never analysed is analysed whatever they say.
      const analyze = t.unknown || past(THRESHOLDS.analyze, Number(t.modified));
      const vacuum = past(THRESHOLDS.vacuumDead, Number(t.dead)) || past(THRESHOLDS.vacuumInserted, Number(t.inserted));
      if (!analyze && !vacuum) continue;
      const name = `"${t.name.replaceAll('"', '""')}"`;
      await this.sql.query(vacuum ? `VACUUM ${analyze ? "(ANALYZE) " : ""}${name}` : `ANALYZE ${name}`);
      if (analyze) done.analyzed.push(t.name);
      if (vacuum) done.vacuumed.push(t.name);
    }
    return done;
  }
}
