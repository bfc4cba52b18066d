import { connect, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { RunEvent } from "@svc/contract";
import type { Logger } from "../logger.js";
import { jsonOf, type StoredEvent } from "../runs/run-rows.js";

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

/** What instances tell each other on the bus: a wake of a run's driver, or a run to drive. */
export type SignalChannel = "input" | "dispatch";

/** An event as the stream holds it: with the time it was stored (an event not published yet has none). */
export type TimedEvent = StoredEvent & { at?: Date };

export const isBusUnavailable = (err: unknown): err is BusUnavailable => err instanceof BusUnavailable;

/** Direct gets in flight at once for one read (a page, a compaction). */
const READ_WINDOW = 128;
/** How long one publish waits for the stream's acknowledgement before it is sent again. */
const PUBLISH_TIMEOUT_MS = 2000;
/** A publish that failed (NATS away) is sent again after this long, until it is stored. */
const RETRY_MS = 250;

export interface RunStreamOptions {
  url: string;
  /** The JetStream stream's name; its subjects are `<name>.ev.<run id>.<seq>`. */
  stream: string;
  instance: string;
  logger: Logger;
}

/**
 * A run's events on NATS JetStream (`NATS_URL`): one subject per event,
 * `<stream>.ev.<run id>.<seq>`, in one stream that keeps one message per subject
 * (a re-publish, after a takeover or a lost acknowledgement, replaces the same
 * event with itself: no message id is needed to drop it, which spares a header per
 * event, and live readers ignore an event they have). The SSE id of an event is its seq: a run's ids are
 * contiguous whatever the stream's own sequence. Reads are direct gets by
 * subject (no consumer, nothing kept per reader); live events reach only the
 * instances subscribed to the run's subjects, those with a reader of it.
 *
 * Postgres stays the record of a run: its last step's events are kept on its
 * row (`runs.outbox`) until published, so nothing committed is lost when an
 * instance dies between its commit and its publish, and a finished run's events
 * are compacted into `run_events`, then purged from the stream (`docs/scaling.md`).
 */
export class RunStream {
  private down: unknown = null;
  private readonly subscriptions = new Map<string, Subscription>();
  private closed = false;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly options: RunStreamOptions,
  ) {}

  /** Connects and makes sure the stream exists; fails at once, saying so, when NATS cannot be reached at start. */
  static async open(options: RunStreamOptions, onReconnect: () => void): Promise<RunStream> {
    let nc: NatsConnection;
    try {
      nc = await connect({ servers: options.url, name: `svc ${options.instance}`, maxReconnectAttempts: -1, reconnectTimeWait: 250, noEcho: true, timeout: 5000 });
    } catch (err) {
      throw new Error(`NATS_URL: could not connect to ${options.url} (${(err as Error).message}); start NATS with JetStream (nats-server -js) or leave NATS_URL out to keep run events in Postgres`, { cause: err });
    }
    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm, options.stream);
    const bus = new RunStream(nc, jetstream(nc), jsm, options);
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") bus.lost(new Error(`disconnected from ${s.server}`));
        if (s.type === "reconnect") {
          bus.back();
          // Live messages sent while the link was down were missed: every reader here looks, once the
          // server has its subscriptions again (a flush answers after them), so nothing falls between.
          void nc.flush().then(onReconnect, onReconnect);
        }
      }
    })().catch(() => {});
    return bus;
  }

  private subject(runId: string, seq: number | "*" | ">" | ""): string {
    return `${this.options.stream}.ev.${runId}.${seq}`;
  }

  /**
   * Stores a step's events, in order, each once; returns once the stream has
   * them all. NATS away: sent again every RETRY_MS until stored (the driver's
   * next step waits, the run goes on when NATS is back).
   */
  async append(runId: string, events: StoredEvent[]): Promise<void> {
    for (;;) {
      try {
        await Promise.all(events.map((e) => this.js.publish(this.subject(runId, e.seq), jsonOf(e), { timeout: PUBLISH_TIMEOUT_MS })));
        this.back();
        return;
      } catch (err) {
        if (this.closed) throw new BusUnavailable("the run bus is closed", { cause: err });
        this.lost(err);
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    }
  }

  /** Events `from`..`to` of a run, in order, each with when the stream stored it, up to the first missing one (null where the stream has none). */
  async read(runId: string, from: number, to: number): Promise<(TimedEvent | null)[]> {
    const out: (TimedEvent | null)[] = [];
    for (let start = from; start <= to; start += READ_WINDOW) {
      const seqs = Array.from({ length: Math.min(READ_WINDOW, to - start + 1) }, (_, i) => start + i);
      let got;
      try {
        got = await Promise.all(seqs.map((seq) => this.jsm.direct.getMessage(this.options.stream, { last_by_subj: this.subject(runId, seq) })));
      } catch (err) {
        this.lost(err);
        throw new BusUnavailable(`could not read run ${runId}'s events from NATS`, { cause: err });
      }
      for (let i = 0; i < seqs.length; i++) {
        const m = got[i];
        const data = m?.json<RunEvent>();
        out.push(m && data ? { seq: seqs[i], kind: data.kind, data, at: m.time } : null);
      }
      if (got.some((m) => m === null)) break;
    }
    return out;
  }

  /**
   * Tells one instance something, on a core subject of its own (`<stream>.input.<instance>`: a wake of a
   * run it drives, with the answer; `<stream>.dispatch.<instance>`: a run to drive). Nothing is kept:
   * one lost (NATS away, the instance gone) is made up by the drivers' polls and the engine's sweep.
   */
  signal(instance: string, channel: SignalChannel, payload: string): void {
    try {
      this.nc.publish(`${this.options.stream}.${channel}.${instance}`, payload);
    } catch {
      // closed or draining: the poll makes up for it
    }
  }

  /** This instance's signals of a channel (see `signal`). Returns how to stop. */
  listen(instance: string, channel: SignalChannel, handler: (payload: string) => void): () => void {
    const sub = this.nc.subscribe(`${this.options.stream}.${channel}.${instance}`, {
      callback: (err, msg) => {
        if (!err) handler(msg.string());
      },
    });
    return () => sub.unsubscribe();
  }

  /** Drops a run's events from the stream (once they are compacted into Postgres). */
  async purge(runId: string): Promise<void> {
    await this.jsm.streams.purge(this.options.stream, { filter: this.subject(runId, ">") });
  }

  /**
   * Live events of a run as they are stored by other instances (this instance's own are not echoed).
   * `onReady` once the server has the subscription: an event published before then was committed
   * before then, so a read made after `onReady` finds it (the reader reads once more then).
   */
  watch(runId: string, onEvent: (e: StoredEvent) => void, onReady: () => void): void {
    if (this.subscriptions.has(runId)) return;
    const prefix = this.subject(runId, "").length;
    const sub = this.nc.subscribe(this.subject(runId, "*"), {
      callback: (err, msg) => {
        if (err) return;
        const seq = Number(msg.subject.slice(prefix));
        let data: RunEvent;
        try {
          data = msg.json<RunEvent>();
        } catch {
          return; // not an event of ours: ignored
        }
        if (Number.isSafeInteger(seq) && seq > 0 && typeof data?.kind === "string") onEvent({ seq, kind: data.kind, data });
      },
    });
    this.subscriptions.set(runId, sub);
    // NATS away: the readers look anyway (and read again each second until it is back).
    void this.nc.flush().then(onReady, onReady);
  }

  unwatch(runId: string): void {
    this.subscriptions.get(runId)?.unsubscribe();
    this.subscriptions.delete(runId);
  }

  /** Runs this instance receives live events of (a reader here). */
  get watched(): number {
    return this.subscriptions.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.nc.drain().catch(() => this.nc.close());
  }

  private lost(err: unknown): void {
    if (this.down) return;
    this.down = err;
    this.options.logger.warn({ err }, "NATS unreachable: run events wait for it (sent again every 250 ms)");
  }

  private back(): void {
    if (!this.down) return;
    this.down = null;
    this.options.logger.info("NATS reachable again");
  }
}

/** The stream, made once: a message per subject (an event), file storage, direct gets. No age limit: a run's events stay until compacted. */
async function ensureStream(jsm: JetStreamManager, name: string): Promise<void> {
  const config = { name, subjects: [`${name}.ev.>`], allow_direct: true, max_msgs_per_subject: 1 };
  try {
    await jsm.streams.info(name);
  } catch {
    try {
      await jsm.streams.add(config);
    } catch (err) {
      // Made meanwhile by another instance starting at the same time.
      await jsm.streams.info(name).catch(() => {
        throw err;
      });
    }
  }
}
