import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import { isDatabaseUnavailable } from "../db/outage.js";

/** How long heartbeats gather before one statement writes them all. */
export const HEARTBEAT_FLUSH_MS = 1000;

interface Beat {
  instance: string;
  /** When its last heartbeat came. */
  at: Date;
  /** The runtimes it said are busy, sorted, as one key. */
  busy: string[];
  waiters: ((r: { revoked: boolean }) => void)[];
  fail: ((err: unknown) => void)[];
}

/**
 * Heartbeats written in batches: each beat is kept in memory, and one statement
 * per `flushMs` writes `last_heartbeat_at` for every machine that beat since
 * (10,000 idle machines beating every 10 s: one statement a second, not 1,000).
 * It answers every beat, after that write, whether its machine was revoked (a
 * revocation missed by its notification shows there). A runtime's busy flag is
 * written only when what the machine says changed, in one statement too.
 *
 * A write that meets the database unreachable answers its beats "not revoked"
 * (the connections stay open) and is tried again at the next flush; a beat then
 * writes the time it came, never a later one.
 */
export class HeartbeatBatch {
  private pending = new Map<string, Beat>();
  /** What each machine's runtimes were last written as busy (the key of `Beat.busy`); none: unknown, written at its next beat. */
  private readonly busyWritten = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly sql: Sql,
    private readonly clock: Clock,
    private readonly flushMs = HEARTBEAT_FLUSH_MS,
  ) {}

  beat(machineId: string, instance: string, busy: string[]): Promise<{ revoked: boolean }> {
    if (this.stopped) return Promise.resolve({ revoked: false });
    return new Promise((resolve, reject) => {
      const had = this.pending.get(machineId);
      const sorted = [...new Set(busy)].sort();
      if (had) {
        had.instance = instance;
        had.at = this.clock.now();
        had.busy = sorted;
        had.waiters.push(resolve);
        had.fail.push(reject);
      } else this.pending.set(machineId, { instance, at: this.clock.now(), busy: sorted, waiters: [resolve], fail: [reject] });
      this.schedule();
    });
  }

  /** The machine's runtimes were written (connected, disconnected, advertised): its next beat writes its busy flags again. */
  forget(machineId: string): void {
    this.busyWritten.delete(machineId);
  }

  /** No more writes: pending beats are answered "not revoked" and dropped; resolves once a write under way ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const b of this.pending.values()) for (const w of b.waiters) w({ revoked: false });
    this.pending.clear();
    await this.flushing;
  }

  private schedule(): void {
    if (this.timer || this.flushing || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flushing = this.flush().finally(() => {
        this.flushing = null;
        if (this.pending.size > 0) this.schedule();
      });
    }, this.flushMs);
    this.timer.unref();
  }

  /** Writes every pending beat in one statement (and the busy flags that changed in another), then answers them. */
  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = new Map();
    if (batch.size === 0) return;
    const ids = [...batch.keys()];
    const beats = [...batch.values()];
    let revoked: Set<string>;
    try {
      // The machines still held by the beat's instance and not removed get their beat's time; the answer names those removed (or gone).
      const rows = await this.sql.query<{ id: string }>(
        `WITH beat AS (SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS b(id, instance, at)),
              moved AS (UPDATE machines m SET last_heartbeat_at = GREATEST(m.last_heartbeat_at, beat.at)
                          FROM beat WHERE m.id = beat.id AND m.connected_instance = beat.instance AND m.revoked_at IS NULL RETURNING m.id)
         SELECT beat.id FROM beat LEFT JOIN machines m ON m.id = beat.id WHERE m.id IS NULL OR m.revoked_at IS NOT NULL`,
        [ids, beats.map((b) => b.instance), beats.map((b) => b.at.toISOString())],
        { prepared: true },
      );
      revoked = new Set(rows.map((r) => r.id));
      await this.writeBusy(batch);
    } catch (err) {
      if (isDatabaseUnavailable(err)) {
        // Kept for the next flush (a newer beat of the same machine, come meanwhile, wins); the connections stay.
        for (const [id, b] of batch) {
          for (const w of b.waiters) w({ revoked: false });
          if (!this.pending.has(id) && !this.stopped) this.pending.set(id, { ...b, waiters: [], fail: [] });
        }
        return;
      }
      for (const b of beats) for (const f of b.fail) f(err);
      return;
    }
    for (const [id, b] of batch) for (const w of b.waiters) w({ revoked: revoked.has(id) });
  }

  /** The busy flags of the machines whose busy runtimes changed since last written (idle machines: nothing). */
  private async writeBusy(batch: Map<string, Beat>): Promise<void> {
    const changed: { id: string; busy: string[] }[] = [];
    for (const [id, b] of batch) if (this.busyWritten.get(id) !== JSON.stringify(b.busy)) changed.push({ id, busy: b.busy });
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
