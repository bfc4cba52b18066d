import { connect, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { RunEvent } from "@svc/contract";
import type { Logger } from "../logger.js";
import { jsonOf, type StoredEvent } from "../runs/run-rows.js";
import { BusOutage, BusUnavailable, isBusUnavailable } from "./outage.js";

export { BusUnavailable, isBusUnavailable };

/** What instances tell each other on the bus: a wake of a run's driver, or a run to drive. */
export type SignalChannel = "input" | "dispatch";

/** An event as the stream holds it: with the time it was stored (an event not published yet has none). */
export type TimedEvent = StoredEvent & { at?: Date };

/** Direct gets in flight at once for one read (a page, a compaction). */
const READ_WINDOW = 128;
/** How long one publish waits for the stream's acknowledgement before it is sent again. */
const PUBLISH_TIMEOUT_MS = 2000;
/** A publish that failed (NATS away) is sent again after this long, until it is stored. */
const RETRY_MS = 250;
/** How long the outage's probe (after a reconnect, then every PROBE_MS until one answers) waits for JetStream's answer. */
const PROBE_TIMEOUT_MS = 1000;
const PROBE_MS = 500;

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
  /** The outage record: logged once per outage, and what reads check first (`docs/operators/operations.md`, "When NATS is away"). */
  private readonly outage: BusOutage;
  private readonly subscriptions = new Map<string, Subscription>();
  private closed = false;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly options: RunStreamOptions,
    probe: JetStreamManager,
    onBack: () => void,
  ) {
    this.outage = new BusOutage(() => probe.streams.info(options.stream), options.logger, onBack, PROBE_MS);
  }

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
    // Live messages sent while the link was down were missed: every reader here looks once the outage has
    // ended, a call having got through after the reconnect (so the server has this connection's subscriptions
    // again: they go first), and nothing falls between.
    const bus = new RunStream(nc, jetstream(nc), jsm, options, await jetstreamManager(nc, { timeout: PROBE_TIMEOUT_MS, checkAPI: false }), onReconnect);
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") bus.outage.linkLost(`disconnected from ${s.server}`);
        else if (s.type === "reconnecting") bus.outage.linkLost("reconnecting");
        else if (s.type === "reconnect") bus.outage.linkBack();
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
    let warned = false;
    for (;;) {
      const began = this.outage.now();
      try {
        await Promise.all(events.map((e) => this.js.publish(this.subject(runId, e.seq), jsonOf(e), { timeout: PUBLISH_TIMEOUT_MS })));
        this.outage.succeeded(began);
        return;
      } catch (err) {
        if (this.closed) throw new BusUnavailable("the run bus is closed", { cause: err });
        // NATS away: the outage's (logged once, by it). Another failure is said once per step, and sent again too.
        if (!this.outage.failed(err, began) && !warned) {
          warned = true;
          this.options.logger.warn({ err, runId }, `could not publish a run's events to NATS: sent again every ${RETRY_MS} ms`);
        }
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    }
  }

  /** Events `from`..`to` of a run, in order, each with when the stream stored it, up to the first missing one (null where the stream has none). */
  /** Refuses at once (`BusUnavailable`: 503 `bus_unavailable`) while an outage is known: a request that must read the bus does not wait for the client's time-out. */
  reachable(what: string): void {
    this.outage.check(what);
  }

  async read(runId: string, from: number, to: number): Promise<(TimedEvent | null)[]> {
    const out: (TimedEvent | null)[] = [];
    for (let start = from; start <= to; start += READ_WINDOW) {
      const seqs = Array.from({ length: Math.min(READ_WINDOW, to - start + 1) }, (_, i) => start + i);
      // NATS known away: refused now (a request answers 503 at once, a reader reads again in a second), not after the client's time-out.
      this.outage.check(`could not read run ${runId}'s events`);
      const began = this.outage.now();
      let got;
      try {
        got = await this.outage.race(
          Promise.all(seqs.map((seq) => this.jsm.direct.getMessage(this.options.stream, { last_by_subj: this.subject(runId, seq) }))),
          `could not read run ${runId}'s events`,
        );
        this.outage.succeeded(began);
      } catch (err) {
        if (isBusUnavailable(err)) throw err; // the outage began while it waited
        if (!this.outage.failed(err, began)) this.options.logger.warn({ err, runId }, "could not read a run's events from NATS");
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
    const began = this.outage.now();
    try {
      await this.jsm.streams.purge(this.options.stream, { filter: this.subject(runId, ">") });
      this.outage.succeeded(began);
    } catch (err) {
      this.outage.failed(err, began);
      throw err;
    }
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
    this.outage.close();
    await this.nc.drain().catch(() => this.nc.close());
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
