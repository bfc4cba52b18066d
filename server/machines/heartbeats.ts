import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import { isDatabaseUnavailable } from "../db/outage.js";

/** How long heartbeats gather before one statement writes what changed. */
export const HEARTBEAT_FLUSH_MS = 1000;

/** A connected machine's `last_heartbeat_at` is written at most this often (its connect and disconnect write it too). */
export const LAST_SEEN_WRITE_MS = 5 * 60_000;

interface Beat {
  instance: string;
  /** When its last heartbeat came. */
  at: Date;
  /** The runtimes it said are busy, sorted. */
  busy: string[];
}

/**
 * Heartbeats kept in memory, written only when something changed. A machine's
 * liveness lives with its connection (liveness.ts): a heartbeat re-arms the
 * connection's silence timer and writes nothing, so 10,000 idle machines
 * beating every 10 s write no row for it. What is written, in at most two
 * statements per `flushMs` for all machines:
 *  - a runtime's busy flag, when what the machine says changed;
 *  - the coarse last-seen (`last_heartbeat_at`), at most once per
 *    `LAST_SEEN_WRITE_MS` per machine (10,000 machines: about 33 rows a second).
 *
 * A write that meets the database unreachable is kept and tried again at the
 * next flush (a newer beat of the same machine wins); a beat then writes the
 * time it came, never a later one.
 */
export class HeartbeatBatch {
  private pending = new Map<string, Beat>();
  /** What each machine's runtimes were last written as busy (the key of `Beat.busy`); none: unknown, written at its next beat. */
  private readonly busyWritten = new Map<string, string>();
  /** When each connected machine's last-seen was last written (its connect wrote it). */
  private readonly seenWritten = new Map<string, number>();
  /** When each connected machine was last heard (its disconnect writes it as its last-seen). */
  private readonly heard = new Map<string, Date>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly sql: Sql,
    private readonly clock: Clock,
    private readonly flushMs = HEARTBEAT_FLUSH_MS,
    private readonly lastSeenWriteMs = LAST_SEEN_WRITE_MS,
    /** A write that failed for another reason than an outage (it is tried again at the next flush too). */
    private readonly failed: (err: unknown) => void = () => {},
  ) {}

  /** A heartbeat: kept in memory; written only when its busy runtimes changed or its last-seen is due. */
  beat(machineId: string, instance: string, busy: string[]): void {
    if (this.stopped) return;
    const at = this.clock.now();
    this.heard.set(machineId, at);
    const sorted = busy.length === 0 ? busy : [...new Set(busy)].sort();
    const seenDue = at.getTime() - (this.seenWritten.get(machineId) ?? 0) >= this.lastSeenWriteMs;
    const busyChanged = this.busyWritten.get(machineId) !== JSON.stringify(sorted);
    if (!seenDue && !busyChanged && !this.pending.has(machineId)) return;
    this.pending.set(machineId, { instance, at, busy: sorted });
    this.schedule();
  }

  /** The machine's connection was just written (its runtimes, or it connected at `connectedAt`): its next beat writes its busy flags again. */
  forget(machineId: string, connectedAt?: Date): void {
    this.busyWritten.delete(machineId);
    if (connectedAt) {
      this.seenWritten.set(machineId, connectedAt.getTime());
      this.heard.set(machineId, connectedAt);
    }
  }

  /** Its connection ended: when it was last heard (null: not here), and nothing more kept for it. */
  disconnected(machineId: string): Date | null {
    const heard = this.heard.get(machineId) ?? null;
    this.busyWritten.delete(machineId);
    this.seenWritten.delete(machineId);
    this.heard.delete(machineId);
    this.pending.delete(machineId);
    return heard;
  }

  /** No more writes: pending beats are dropped; resolves once a write under way ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.pending.clear();
    await this.flushing;
  }

  private schedule(): void {
    if (this.timer || this.flushing || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flushing = this.flush().catch(this.failed).finally(() => {
        this.flushing = null;
        if (this.pending.size > 0) this.schedule();
      });
    }, this.flushMs);
    this.timer.unref();
  }

  /** Writes the last-seen times due (one statement) and the busy flags that changed (another). */
  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = new Map();
    if (batch.size === 0) return;
    const seen = [...batch].filter(([id, b]) => b.at.getTime() - (this.seenWritten.get(id) ?? 0) >= this.lastSeenWriteMs);
    try {
      if (seen.length > 0) {
        // Only the machines still held by the beat's instance: one held elsewhere by now is that instance's to write.
        await this.sql.query(
          `UPDATE machines m SET last_heartbeat_at = GREATEST(m.last_heartbeat_at, beat.at)
             FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS beat(id, instance, at)
            WHERE m.id = beat.id AND m.connected_instance = beat.instance AND m.revoked_at IS NULL`,
          [seen.map(([id]) => id), seen.map(([, b]) => b.instance), seen.map(([, b]) => b.at.toISOString())],
          { prepared: true },
        );
        for (const [id, b] of seen) if (this.heard.has(id)) this.seenWritten.set(id, b.at.getTime());
      }
      await this.writeBusy(batch);
    } catch (err) {
      // Kept for the next flush (a newer beat of the same machine, come meanwhile, wins), unless its connection ended meanwhile.
      for (const [id, b] of batch) if (!this.pending.has(id) && !this.stopped && this.heard.has(id)) this.pending.set(id, b);
      if (!isDatabaseUnavailable(err)) throw err;
    }
  }

  /** The busy flags of the machines whose busy runtimes changed since last written (idle machines: nothing). */
  private async writeBusy(batch: Map<string, Beat>): Promise<void> {
    const changed: { id: string; busy: string[] }[] = [];
    for (const [id, b] of batch) if (this.heard.has(id) && this.busyWritten.get(id) !== JSON.stringify(b.busy)) changed.push({ id, busy: b.busy });
    if (changed.length === 0) return;
    await this.sql.query(
      `UPDATE runtimes r SET busy = (b.busy ? r.name)
         FROM jsonb_to_recordset($1::jsonb) AS b(id text, busy jsonb)
        WHERE r.machine_id = b.id AND r.busy IS DISTINCT FROM (b.busy ? r.name)`,
      [JSON.stringify(changed)],
      { prepared: true },
    );
    for (const c of changed) this.busyWritten.set(c.id, JSON.stringify(c.busy));
  }
}
