/**
 * A token bucket: `capacity` tokens, refilled at `perSecond`; `take` says whether
 * there were enough. Used per worker connection (messages, bytes, heartbeats,
 * runtimes lists, error reports), so a machine that floods is closed, not served.
 */
export class TokenBucket {
  private tokens: number;
  private at: number;
  private lastScale = 1;

  constructor(
    readonly capacity: number,
    readonly perSecond: number,
    /** Scales both (a connection's allowance grows with the jobs it runs); 1 by default. */
    private readonly scale: () => number = () => 1,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = capacity;
    this.at = this.now();
  }

  take(n = 1): boolean {
    const t = this.now();
    const k = this.scale();
    // A larger allowance (another job) brings its own burst.
    if (k > this.lastScale) this.tokens += (k - this.lastScale) * this.capacity;
    this.lastScale = k;
    this.tokens = Math.min(this.capacity * k, this.tokens + ((t - this.at) / 1000) * this.perSecond * k);
    this.at = t;
    if (this.tokens < n) return false;
    this.tokens -= n;
    return true;
  }
}

/**
 * What a worker connection may send, per second, for itself and again for each
 * job it runs (`WORKER_MESSAGES_PER_SECOND`, `WORKER_BYTES_PER_SECOND`; bursts of
 * 5 s and 4 s of it), and the largest job frame sent to it (`WORKER_JOB_FRAME_BYTES`).
 */
export interface ConnectionLimits {
  messagesPerSecond: number;
  bytesPerSecond: number;
  jobFrameBytes: number;
}

/** Messages of a kind a worker sends rarely, each with its own bucket: a heartbeat every 10 s, a runtimes list when they change. */
export const KIND_LIMITS = {
  heartbeat: { capacity: 10, perSecond: 1 / 3, what: "heartbeats (at most 10 at once, then one per 3 s, or three per interval told in welcome when that is shorter)" },
  runtimes: { capacity: 5, perSecond: 1 / 12, what: "runtimes lists (at most 5 at once, then one per 12 s)" },
  error: { capacity: 20, perSecond: 1, what: "error reports (at most 20 at once, then one per second)" },
  runtime_limits: { capacity: 20, perSecond: 1 / 2, what: "runtime_limits reports (at most 20 at once, then one per 2 s)" },
  jobs_held: { capacity: 2, perSecond: 1 / 60, what: "jobs_held lists (one after each welcome: at most 2 at once, then one per minute)" },
} as const;
