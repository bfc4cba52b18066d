import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { isDatabaseUnavailable } from "../db/outage.js";

/**
 * Where a machine's liveness lives: with its connection. A machine is online
 * while its row names the instance holding its connection and that instance is
 * alive (it wrote `server_instances.alive_at` within the heartbeat timeout).
 * The instance closes a connection that stays silent for the heartbeat timeout
 * (connection.ts) and marks it offline then, so "held by a live instance" means
 * "heard from within the timeout", as a heartbeat written to the row did, with
 * one row written per instance instead of one per machine per beat.
 *
 * `m` is the alias of `machines`, `cutoff` the placeholder of the oldest
 * `alive_at` that still counts (now − the heartbeat timeout).
 */
export const machineOnlineSql = (m: string, cutoff: string) =>
  `(${m}.connected_instance IS NOT NULL AND EXISTS (SELECT 1 FROM server_instances si WHERE si.id = ${m}.connected_instance AND si.alive_at > ${cutoff}))`;

/** Instance rows silent for this long are removed when an instance starts (nothing reads them: their machines went offline long ago). */
const PRUNE_AFTER_DAYS = 7;

/**
 * This instance's beat: one statement every `everyMs` that writes its `alive_at`
 * and checks the machines whose connections it holds against their rows:
 *  - removed (revoked) or gone: closed here (a revocation whose notification was
 *    missed, during a database outage say, shows within one beat);
 *  - rows naming this instance for a machine it does not hold any more (its
 *    offline write was lost to an outage): written offline in the same statement.
 * A beat that meets the database unreachable is tried again at the next one; the
 * instance then reads offline to the others after the heartbeat timeout, as its
 * machines' heartbeats did before.
 */
export class InstanceBeat {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(
    private readonly sql: Sql,
    private readonly clock: Clock,
    private readonly instance: string,
    private readonly everyMs: number,
    /** The machines of every connection open here (hello said or not). */
    private readonly held: () => string[],
    /** Those of them removed or gone: their connections are closed. */
    private readonly removed: (machineIds: string[]) => void,
    private readonly log: Logger,
  ) {}

  /** The first beat, awaited (a machine connecting here is online from its first write), then one every `everyMs`. */
  async start(): Promise<void> {
    const now = this.clock.now();
    await this.sql.query(`DELETE FROM server_instances WHERE alive_at < $1`, [new Date(now.getTime() - PRUNE_AFTER_DAYS * 86_400_000)]);
    await this.beat();
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.beat()
        .catch((err) => {
          if (!isDatabaseUnavailable(err)) this.log.error({ err }, "instance beat failed");
        })
        .finally(() => (this.running = null));
    }, this.everyMs);
    this.timer.unref();
  }

  /** No more beats; resolves once one under way ended. The row stays and goes stale: whatever still names this instance reads offline. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  async beat(): Promise<void> {
    // The held machines and the time, taken together: a connection made here after them (its row's `connected_at` later) is not stray.
    const held = this.held();
    const rows = await this.sql.query<{ id: string }>(
      `WITH me AS (INSERT INTO server_instances (id, started_at, alive_at, marks_watched_runs, stores_run_messages) VALUES ($1, $2, $2, true, true) ON CONFLICT (id) DO UPDATE SET alive_at = EXCLUDED.alive_at),
            stray AS (UPDATE machines SET connected_instance = NULL WHERE connected_instance = $1 AND connected_at < $2 AND NOT (id = ANY ($3::text[])))
       SELECT h.id FROM unnest($3::text[]) AS h(id) LEFT JOIN machines m ON m.id = h.id WHERE m.id IS NULL OR m.revoked_at IS NOT NULL`,
      [this.instance, this.clock.now(), held],
      { prepared: true },
    );
    if (rows.length > 0) this.removed(rows.map((r) => r.id));
  }
}
