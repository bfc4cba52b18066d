import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";

/** Counters older than this are gone: longer than any window in use. */
const PRUNE_AFTER_SECONDS = 24 * 60 * 60;
const PRUNE_EVERY_HITS = 500;

/** A fixed-window limit: at most `max` hits per `windowSeconds`. */
export interface Limit {
  max: number;
  windowSeconds: number;
}

/** One counter: its key names the scope (`guess:session:<id>`, `code:pk:<key>`, ...). */
export interface Bucket {
  key: string;
  limit: Limit;
  /** Said in the 429's message: what was limited. */
  what: string;
}

/**
 * Rate limits shared by every instance: fixed-window counters in
 * `rate_limit_buckets`, bumped with one atomic upsert each, so concurrent
 * requests on any instance count exactly.
 */
export class RateLimiter {
  private hitsSincePrune = 0;

  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  /** Refuses (429 with Retry-After) when any bucket is already full; counts nothing. */
  async check(buckets: Bucket[]): Promise<void> {
    const now = this.clock.now();
    const rows = await this.prisma.rateLimitBucket.findMany({ where: { key: { in: buckets.map((b) => b.key) } } });
    for (const b of buckets) {
      const row = rows.find((r) => r.key === b.key);
      if (row && row.count >= b.limit.max) this.refuseIfCurrent(b, row.windowStart, now);
    }
  }

  /** Counts one hit in every bucket. */
  async hit(buckets: Bucket[]): Promise<{ bucket: Bucket; count: number; windowStart: Date }[]> {
    const now = this.clock.now();
    const out = [];
    for (const b of buckets) {
      const windowOpen = new Date(now.getTime() - b.limit.windowSeconds * 1000);
      const [row] = await this.prisma.$queryRaw<{ count: number; window_start: Date }[]>`
        INSERT INTO rate_limit_buckets (key, count, window_start) VALUES (${b.key}, 1, ${now})
        ON CONFLICT (key) DO UPDATE SET
          count = CASE WHEN rate_limit_buckets.window_start <= ${windowOpen} THEN 1 ELSE rate_limit_buckets.count + 1 END,
          window_start = CASE WHEN rate_limit_buckets.window_start <= ${windowOpen} THEN ${now} ELSE rate_limit_buckets.window_start END
        RETURNING count, window_start`;
      out.push({ bucket: b, count: Number(row.count), windowStart: new Date(row.window_start) });
    }
    if (++this.hitsSincePrune >= PRUNE_EVERY_HITS) {
      this.hitsSincePrune = 0;
      await this.prune(now);
    }
    return out;
  }

  /** Counts one hit in every bucket and refuses when that hit goes past a limit. */
  async take(buckets: Bucket[]): Promise<void> {
    const now = this.clock.now();
    for (const { bucket, count, windowStart } of await this.hit(buckets)) {
      if (count > bucket.limit.max) this.refuseIfCurrent(bucket, windowStart, now);
    }
  }

  /** Forgets counters whose window ended long ago: one row per address or session would otherwise pile up. */
  async prune(now = this.clock.now()): Promise<number> {
    const { count } = await this.prisma.rateLimitBucket.deleteMany({ where: { windowStart: { lt: new Date(now.getTime() - PRUNE_AFTER_SECONDS * 1000) } } });
    return count;
  }

  private refuseIfCurrent(b: Bucket, windowStart: Date, now: Date): void {
    const endsAt = windowStart.getTime() + b.limit.windowSeconds * 1000;
    if (endsAt <= now.getTime()) return;
    const retryAfter = Math.max(1, Math.ceil((endsAt - now.getTime()) / 1000));
    throw new ApiError("rate_limited", `Too many ${b.what}; retry after ${retryAfter} seconds.`, { headers: { "Retry-After": String(retryAfter) } });
  }
}
