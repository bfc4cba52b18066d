import type { Prisma, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";

/** A fixed-window limit: at most `max` counted requests per `windowSeconds`. */
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

/** Counters older than this are gone: longer than any window in use. */
const PRUNE_AFTER_SECONDS = 24 * 60 * 60;
const PRUNE_EVERY_ADMITS = 500;

interface Row {
  key: string;
  count: number;
  window_start: Date;
}

/**
 * Rate limits shared by every instance: fixed-window counters in
 * `rate_limit_buckets`. A request's buckets are locked together (in key order,
 * so two requests never deadlock) for the time it takes to decide, so the
 * counts are exact under any concurrency, and a refused request counts in no
 * bucket: a flood refused by one limit never uses up another (an attacker at
 * one address cannot spend an app's whole budget).
 */
export class RateLimiter {
  private admitsSincePrune = 0;

  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  /** Refuses (429 with Retry-After) when any bucket is full; otherwise counts the request in each. */
  async take(buckets: Bucket[]): Promise<void> {
    await this.admit(buckets, async () => ({ result: undefined, count: true }));
  }

  /**
   * Refuses (429 with Retry-After) when any bucket is full. Otherwise runs
   * `decide` in the same transaction, with the buckets held, and counts the
   * request in every bucket when it says so (a wrong guess: yes; a right one: no).
   */
  async admit<T>(buckets: Bucket[], decide: (tx: Tx) => Promise<{ result: T; count: boolean }>): Promise<T> {
    const sorted = [...buckets].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const keys = sorted.map((b) => b.key);
    const now = this.clock.now();
    const result = await this.prisma.$transaction(async (tx) => {
      for (const key of keys) {
        await tx.$executeRaw`INSERT INTO rate_limit_buckets (key, count, window_start) VALUES (${key}, 0, ${now}) ON CONFLICT (key) DO NOTHING`;
      }
      const rows = await tx.$queryRaw<Row[]>`SELECT key, count, window_start FROM rate_limit_buckets WHERE key = ANY(${keys}) ORDER BY key FOR UPDATE`;
      for (const b of sorted) {
        const row = rows.find((r) => r.key === b.key)!;
        const endsAt = new Date(row.window_start).getTime() + b.limit.windowSeconds * 1000;
        if (endsAt > now.getTime() && Number(row.count) >= b.limit.max) return { refused: { bucket: b, endsAt } };
      }
      const decided = await decide(tx);
      if (decided.count) {
        for (const b of sorted) {
          const windowOpen = new Date(now.getTime() - b.limit.windowSeconds * 1000);
          await tx.$executeRaw`
            UPDATE rate_limit_buckets SET
              count = CASE WHEN window_start <= ${windowOpen} THEN 1 ELSE count + 1 END,
              window_start = CASE WHEN window_start <= ${windowOpen} THEN ${now} ELSE window_start END
            WHERE key = ${b.key}`;
        }
      }
      return { decided };
    });
    if (++this.admitsSincePrune >= PRUNE_EVERY_ADMITS) {
      this.admitsSincePrune = 0;
      await this.prune(now);
    }
    if ("refused" in result) {
      const { bucket, endsAt } = result.refused!;
      const retryAfter = Math.max(1, Math.ceil((endsAt - now.getTime()) / 1000));
      throw new ApiError("rate_limited", `Too many ${bucket.what}; retry after ${retryAfter} seconds.`, { headers: { "Retry-After": String(retryAfter) } });
    }
    return result.decided.result;
  }

  /** Forgets counters whose window ended long ago: one row per address or session would otherwise pile up. */
  async prune(now = this.clock.now()): Promise<number> {
    const { count } = await this.prisma.rateLimitBucket.deleteMany({ where: { windowStart: { lt: new Date(now.getTime() - PRUNE_AFTER_SECONDS * 1000) } } });
    return count;
  }
}
