import type { Logger } from "../logger.js";

/**
 * NATS away: a read of a run's events from the stream could not be made. Like a
 * database outage it is an outage, not a failure: a reader tries again in a
 * second, a request answers a retryable 503.
 */
export class BusUnavailable extends Error {
  readonly code = "bus_unavailable";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

export const isBusUnavailable = (err: unknown): err is BusUnavailable => err instanceof BusUnavailable;

/** The NATS client's errors (by name: `@nats-io/nats-core`, `@nats-io/jetstream`) that say the link or JetStream is away, not that the call was wrong. */
const LINK_ERRORS = new Set(["TimeoutError", "NoResponders", "NoRespondersError", "ConnectionError", "ClosedConnectionError", "DrainingConnectionError", "JetStreamNotEnabled"]);
/** Socket-level failures reaching NATS. */
const SOCKET_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ECONNABORTED"]);

/**
 * Did this call fail for the link's sake (NATS or its JetStream away, not answering in time), rather
 * than for its own? The error and what it wraps (`cause`), bounded. JetStream's own answers count only
 * as 503 (temporarily unavailable, no responders) and 408 (a request timed out on the server).
 */
export function isLinkFailure(err: unknown): boolean {
  let e = err;
  for (let i = 0; i < 8 && e !== null && typeof e === "object"; i++) {
    if (e instanceof BusUnavailable) return true;
    const o = e as { name?: unknown; code?: unknown; status?: unknown; cause?: unknown };
    if (typeof o.name === "string") {
      if (LINK_ERRORS.has(o.name)) return true;
      if (o.name === "JetStreamStatusError" && (o.code === 503 || o.code === 408)) return true;
      if (o.name === "JetStreamApiError" && (o.status === 503 || o.status === 408)) return true;
    }
    if (typeof o.code === "string" && SOCKET_CODES.has(o.code)) return true;
    e = o.cause;
  }
  return false;
}

/**
 * Keeps one record of a run bus outage for the log, as `DatabaseOutage` does for the database: a `warn`
 * line when it begins, an `info` line when it ends (how long it lasted, the calls that failed and the
 * reads refused meanwhile), nothing in between.
 *
 * It begins when the NATS client says the link is down (`linkLost`: disconnected, reconnecting) or a
 * call fails for the link's sake (`failed`). It ends when the link is back and a call gets through: the
 * client's reconnect alone does not end it (JetStream may not answer yet, and publishes sent during
 * the outage time out after it); a probe is made at the reconnect, then every `probeMs` until one
 * answers, and any call begun during the outage that succeeds ends it too. A call begun before the
 * last outage ended that fails after it (a publish sent while NATS was away, timing out just after
 * the reconnect) is that outage's: no new one is logged.
 *
 * While it lasts the instance knows: `check` refuses a read at once (a request answers `503
 * bus_unavailable` now, not after the client's time-out), and a read in flight when it begins is
 * refused then (`race`).
 */
export class BusOutage {
  /** When the outage began (`performance.now()`); null while the bus is up. */
  private since: number | null = null;
  /** When the last outage ended: a call begun before it that fails is a straggler of that one. */
  private endedAt = Number.NEGATIVE_INFINITY;
  private linkUp = true;
  private failures = 0;
  private refused = 0;
  private probe: NodeJS.Timeout | null = null;
  private probing = false;
  private stopped = false;
  /** Reads in flight: refused at once when an outage begins. */
  private readonly racing = new Set<() => void>();

  constructor(
    /** A call through to JetStream: its answer, after a reconnect, ends the outage. */
    private readonly ping: () => Promise<unknown>,
    private readonly log: Logger,
    /** Called once an outage has ended (the server has this connection's subscriptions again). */
    private readonly onBack: () => void,
    private readonly probeMs = 500,
  ) {}

  /** True while an outage is known (from its beginning until the link is back and a call got through). */
  get active(): boolean {
    return this.since !== null;
  }

  /** When a call begins, for `succeeded` and `failed`. */
  now(): number {
    return performance.now();
  }

  /** The client says the link is down (`disconnect`, `reconnecting`): the outage begins, if it has not. */
  linkLost(reason: string): void {
    this.linkUp = false;
    this.cancelProbe();
    this.begin({ reason });
  }

  /** The client is connected again: the outage ends with the first call that gets through, a probe now. */
  linkBack(): void {
    this.linkUp = true;
    if (this.stopped) return;
    if (this.since === null) return this.onBack();
    this.cancelProbe();
    this.schedule(0);
  }

  /** A call begun at `began` got through. */
  succeeded(began: number): void {
    if (this.since === null || !this.linkUp || began < this.since) return;
    this.end();
  }

  /**
   * A call begun at `began` failed. True: for the link's sake (an outage: begun now, unless one is
   * known or the call was a straggler of the last); false: for its own (the caller says so).
   */
  failed(err: unknown, began: number): boolean {
    if (!isLinkFailure(err)) return false;
    if (this.stopped) return true;
    if (this.since === null && began < this.endedAt) return true;
    this.failures++;
    if (this.since !== null) return true;
    this.begin({ code: (err as { name?: unknown })?.name, reason: String((err as { message?: unknown })?.message ?? err).slice(0, 200) });
    // The client still thinks the link is up (JetStream not answering): probe until it does; a lost link waits for the reconnect.
    if (this.linkUp) this.schedule(this.probeMs);
    return true;
  }

  /** Throws `BusUnavailable` at once while an outage is known: a read is not sent to wait for the client's time-out. */
  check(what: string): void {
    if (this.since === null) return;
    this.refused++;
    throw new BusUnavailable(`${what}: the run bus (NATS) is unreachable`);
  }

  /** `call`, refused at once with `BusUnavailable` should an outage begin before it settles (its own failure, later, is dropped). */
  race<T>(call: Promise<T>, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const refuse = () => {
        this.refused++;
        reject(new BusUnavailable(`${what}: the run bus (NATS) became unreachable`));
      };
      this.racing.add(refuse);
      call.then(
        (v) => {
          this.racing.delete(refuse);
          resolve(v);
        },
        (err: unknown) => {
          this.racing.delete(refuse);
          reject(err);
        },
      );
    });
  }

  close(): void {
    this.stopped = true;
    this.cancelProbe();
  }

  private begin(what: { code?: unknown; reason: string }): void {
    if (this.since !== null || this.stopped) return;
    this.since = performance.now();
    this.log.warn({ code: typeof what.code === "string" ? what.code : undefined, reason: what.reason }, "NATS unreachable: run events wait for it (sent again every 250 ms), reads of the run bus answer 503 until it is back");
    const refusing = [...this.racing];
    this.racing.clear();
    for (const refuse of refusing) refuse();
  }

  private end(): void {
    if (this.since === null) return;
    const now = performance.now();
    this.log.info({ outageMs: Math.round(now - this.since), failed: this.failures, refused: this.refused }, "NATS reachable again");
    this.since = null;
    this.endedAt = now;
    this.failures = 0;
    this.refused = 0;
    this.cancelProbe();
    this.onBack();
  }

  private schedule(ms: number): void {
    if (this.stopped || this.probe || this.probing) return;
    this.probe = setTimeout(() => {
      this.probe = null;
      if (this.since === null || !this.linkUp || this.stopped) return;
      this.probing = true;
      const began = performance.now();
      this.ping().then(
        () => {
          this.probing = false;
          this.succeeded(began);
        },
        () => {
          this.probing = false;
          if (this.since !== null && this.linkUp) this.schedule(this.probeMs);
        },
      );
    }, ms);
    this.probe.unref();
  }

  private cancelProbe(): void {
    if (this.probe) clearTimeout(this.probe);
    this.probe = null;
  }
}
