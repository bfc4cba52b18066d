import { isFinalRunEvent } from "@svc/contract";
import { jsonOf, type StoredEvent } from "./run-rows.js";

/** The run bus's live side (`RunStream`): a run's events stored by other instances, while this one watches it. */
export interface RemoteEvents {
  watch(runId: string, onEvent: (e: StoredEvent) => void, onReady: () => void): void;
  unwatch(runId: string): void;
}

/** Someone reading a run's stream on this instance. */
export interface RunReader {
  /** An event the driver here just handed over (in order; one seen already is ignored by the reader). */
  event(e: StoredEvent): void;
  /** Something new may be stored (written by another instance): read from the database. */
  wake(): void;
}

/** What the bus remembers of a run driven here, for readers that subscribe late: its last events, about this many... */
export const RECENT_EVENTS = 256;
/** ...and at most about this many bytes of them. */
export const RECENT_BYTES = 256 * 1024;
/** How long a run's recent events are kept once it has ended (a reader subscribing just after its end). */
const KEPT_AFTER_END_MS = 10_000;

interface Recent {
  events: { e: StoredEvent; size: number; at: Date }[];
  bytes: number;
  timer: NodeJS.Timeout | null;
}

/**
 * In-process fan-out of a run's events to the readers of its stream on this
 * instance. The driver publishes its events (a run's once stored, a chat's as
 * they are made); events written on another instance arrive with its
 * notification (`stored`), or, when they were too long for it, as a wake, and
 * the reader catches up from the stored rows. Postgres announces a run's steps
 * only once an instance with a reader of it marked it (`WatchedRuns`, the same
 * `watch` as the run bus's). On the run bus (`NATS_URL`) they
 * arrive from NATS instead, and only while a reader of the run is here: the
 * first reader watches the run's subjects, the last one leaving stops.
 *
 * For a run driven here the bus also remembers its last events (bounded), and
 * hands them to a reader that asks once subscribed (`replay`): a reader that comes a moment after
 * the driver began (the request that started the run, attaching once the start
 * returns) is fed from memory, not from the database.
 */
export class RunBus {
  private readonly readers = new Map<string, Set<RunReader>>();
  private readonly recent = new Map<string, Recent>();
  /** Runs whose events this instance receives from the run bus (a reader here, the run driven elsewhere). */
  private readonly watched = new Set<string>();
  /** Of those, the runs whose subscription NATS has not confirmed yet: their readers read once it has (`wake`). */
  private readonly confirming = new Set<string>();

  constructor(private readonly remote: RemoteEvents | null = null) {}

  subscribe(runId: string, reader: RunReader): () => void {
    let set = this.readers.get(runId);
    if (!set) {
      this.readers.set(runId, (set = new Set()));
      // A run driven here feeds its readers itself; one driven elsewhere is heard from the run bus.
      if (!this.drivenHere(runId)) this.watch(runId);
    }
    set.add(reader);
    return () => {
      set.delete(reader);
      if (set.size === 0 && this.readers.get(runId) === set) {
        this.readers.delete(runId);
        this.confirming.delete(runId);
        if (this.watched.delete(runId)) this.remote!.unwatch(runId);
      }
    };
  }

  private drivenHere(runId: string): boolean {
    const r = this.recent.get(runId);
    return r !== undefined && r.timer === null;
  }

  private watch(runId: string): void {
    if (!this.remote || this.watched.has(runId)) return;
    this.watched.add(runId);
    this.confirming.add(runId);
    // Once NATS has the subscription the readers look once: what was published just before it was stored before it.
    this.remote.watch(
      runId,
      (e) => this.stored(runId, [e]),
      () => {
        this.confirming.delete(runId);
        this.wake(runId);
      },
    );
  }

  /** Will this run's readers here be woken once NATS confirms their subscription (so a first read now would be made twice)? */
  confirmingWatch(runId: string): boolean {
    return this.confirming.has(runId);
  }

  /**
   * All the events of a run driven here, with when each was made, when the bus still remembers every one
   * of them (a run of at most RECENT_EVENTS events and about RECENT_BYTES, driven here from its start)
   * and its driver here stored its final event (a final event is handed over only once stored, so all
   * before it were stored by this driver too; a driver that lost the run has none).
   */
  remembered(runId: string): { e: StoredEvent; at: Date }[] | null {
    const events = this.recent.get(runId)?.events;
    if (!events?.length || events[0].e.seq !== 1 || events.at(-1)!.e.seq !== events.length || !isFinalRunEvent(events.at(-1)!.e.kind)) return null;
    return events;
  }

  /** Hands a reader (just subscribed) what the bus remembers of the run: its last events, in order. */
  replay(runId: string, reader: RunReader): void {
    for (const { e } of this.recent.get(runId)?.events ?? []) reader.event(e);
  }

  /** A run driven here from now on: its events are remembered until `ended`. */
  driving(runId: string): void {
    const r = this.recent.get(runId);
    if (r?.timer) clearTimeout(r.timer);
    this.recent.set(runId, { events: [], bytes: 0, timer: null });
  }

  /** The run's driver here is done: what it remembers goes a little later. Readers still here (the run moved on) hear it from the run bus. */
  ended(runId: string): void {
    const r = this.recent.get(runId);
    // Its readers here were handed its final event already: nothing more will come.
    const last = r?.events.at(-1)?.e;
    if (this.readers.has(runId) && !(last && isFinalRunEvent(last.kind))) this.watch(runId);
    if (!r || r.timer) return;
    r.timer = setTimeout(() => this.recent.get(runId) === r && this.recent.delete(runId), KEPT_AFTER_END_MS);
    r.timer.unref();
  }

  /** A run's events, made here by its driver at `at`, for its readers here. */
  publish(runId: string, events: StoredEvent[], at = new Date()): void {
    const r = this.recent.get(runId);
    if (r) {
      for (const e of events) {
        const size = Buffer.byteLength(jsonOf(e)) + 32;
        r.events.push({ e, size, at });
        r.bytes += size;
      }
      while (r.events.length > RECENT_EVENTS || (r.bytes > RECENT_BYTES && r.events.length > 1)) r.bytes -= r.events.shift()!.size;
    }
    this.stored(runId, events);
  }

  /** Whether anyone reads this run's stream here (a notice for a run nobody reads here is not even parsed). */
  hasReaders(runId: string): boolean {
    return this.readers.has(runId);
  }

  /**
   * Events handed to this run's readers here, in order: the driver's (`publish`), or those another
   * instance stored, carried by its notification (a reader ignores one it has, and reads the rows on a gap).
   */
  stored(runId: string, events: StoredEvent[]): void {
    const set = this.readers.get(runId);
    if (!set) return;
    for (const reader of set) for (const e of events) reader.event(e);
  }

  wake(runId: string): void {
    for (const reader of this.readers.get(runId) ?? []) reader.wake();
  }

  /** Wakes every reader (after a lost notification connection, say). */
  wakeAll(): void {
    for (const set of this.readers.values()) for (const reader of set) reader.wake();
  }
}
