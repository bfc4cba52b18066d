import { isFinalRunEvent } from "@svc/contract";
import type { Logger } from "../logger.js";
import { isDatabaseUnavailable } from "../db/outage.js";
import { isBusUnavailable } from "../bus/run-stream.js";
import type { RunBus } from "./bus.js";
import type { RunStore } from "./store.js";
import { jsonOf, type StoredEvent } from "./run-rows.js";

/** Catch-up reads stored events a page at a time, at most this many events... */
export const CATCH_UP_PAGE_EVENTS = 500;
/** ...and about this many bytes (at least one event); the next page is read only once the socket has taken the last one. */
export const CATCH_UP_PAGE_BYTES = 64 * 1024;
/**
 * What one stream may hold for a reader that does not keep up: live events
 * waiting for the socket plus frames written but not yet sent. Past it the
 * reader is closed as slow (it re-attaches with `Last-Event-ID`, losing nothing).
 */
export const STREAM_BUFFER_CAP_BYTES = 1024 * 1024;

/** A catch-up read that failed is tried again after this long (readers are otherwise woken only by events and notifications). */
const RETRY_READ_MS = 1000;

/** How a follower learned its reader's pace: the socket's backpressure. */
export interface Flow {
  /** The socket cannot take more now: wait for `drained`. */
  readonly congested: boolean;
  /** Bytes written and not yet taken by the socket. */
  buffered(): number;
  /** Resolves once the socket can take more (or the stream is gone). */
  drained(): Promise<void>;
}

/** Why a follower stopped: the run's final event was handed over (or the run has none to hand), the reader was too slow, or it was told to stop. */
export type FollowEnd = "end" | "slow_reader" | "stopped";

/**
 * Follows a run's events from just after `after` until its final event: stored
 * events first, then live ones. Each event is handed over once, in order, with
 * no gap.
 *
 * With a `flow` (a socket), the follower keeps the reader's pace: catch-up reads
 * a page of stored events (CATCH_UP_PAGE_*) only once the socket has taken the
 * previous one; live events the socket cannot take yet wait in a buffer, and
 * once that buffer and what the socket holds pass STREAM_BUFFER_CAP_BYTES the
 * follower ends with `slow_reader`. A live event that arrives while catch-up
 * runs, or ahead of what was delivered, is read from the stored rows instead
 * (nothing held); a catching-up reader whose socket takes nothing while the run
 * stores more than STREAM_BUFFER_CAP_BYTES ends with `slow_reader` too.
 *
 * A reader at or past the end of a finished run (its `after` at or beyond the
 * final event) gets that final event again, as stored (its `id` at or below the
 * reader's), and the follower ends: the reader learns how the run ended at once.
 *
 * Returns how to stop following (the run goes on).
 */
export function followRun(
  store: RunStore,
  bus: RunBus,
  log: Logger,
  runId: string,
  after: number,
  onEvent: (e: StoredEvent) => void,
  onEnd: (why: FollowEnd) => void,
  /** False for a run this instance has just started and drives: nothing is stored yet, its events come through the bus (which hands a late subscriber the run's recent events from memory). */
  readFirst = true,
  flow?: Flow,
): () => void {
  let last = after;
  let done = false;
  /** A catch-up loop is running; `behind`: something was stored meanwhile that it has to read too. */
  let reading = false;
  let behind = false;
  /** Live events waiting for the socket, in order, right after `last`. */
  const pending: { e: StoredEvent; size: number }[] = [];
  let pendingBytes = 0;
  /** While catching up: what the run stored since the socket last took something (the reader's lag, read from the rows later). */
  let lagBytes = 0;
  let waitingDrain = false;
  /** Woken while events waited for the socket: catch up once they are out. */
  let stale = false;
  /** Whether the run may have ended at or before `after` (cleared once it is seen active with nothing stored past `after`). */
  let mayBePastEnd = true;

  const finish = (why: FollowEnd) => {
    if (done) return;
    done = true;
    unsubscribe();
    pending.length = 0;
    pendingBytes = 0;
    onEnd(why);
  };
  const deliver = (e: StoredEvent) => {
    last = e.seq;
    onEvent(e);
    if (isFinalRunEvent(e.kind)) finish("end");
  };
  /** The reader is at or past the end of a finished run: hand its final event over again, and end. */
  const replayEnd = (final: StoredEvent) => {
    onEvent(final);
    finish("end");
  };

  /** Nothing stored after `last`, nothing delivered yet: has the run ended before `after`? True when the follower ended. */
  const endedBefore = async (): Promise<boolean> => {
    const end = await store.runEnd(runId);
    if (done) return true;
    if (end.last && end.last.seq > last) {
      behind = true; // stored since the page was read: read it
      return false;
    }
    if (end.active) {
      // A reader at the head of an active run: what comes next is numbered past `after`.
      if ((end.last?.seq ?? 0) === after) mayBePastEnd = false;
      return false;
    }
    if (end.last && isFinalRunEvent(end.last.kind)) replayEnd(end.last);
    else finish("end"); // ended with nothing to hand over
    return true;
  };

  const catchUp = async () => {
    if (done) return;
    if (reading) {
      behind = true;
      return;
    }
    reading = true;
    stale = false;
    // What waited for the socket is stored: the catch-up reads it in order.
    pending.length = 0;
    pendingBytes = 0;
    lagBytes = 0;
    try {
      for (;;) {
        if (flow?.congested) await flow.drained();
        if (done) return;
        behind = false;
        lagBytes = 0;
        const page = await store.eventPage(runId, last, CATCH_UP_PAGE_EVENTS, CATCH_UP_PAGE_BYTES);
        // The stored rows after `last`, in order, are what comes next.
        for (const e of page.events) {
          if (done) return;
          deliver(e);
        }
        if (done) return;
        if (page.events.length === 0 && last === after && mayBePastEnd && !behind && (await endedBefore())) return;
        if (!page.more && !behind) return;
      }
    } catch (err) {
      // The database or the run bus away (an outage is logged once, elsewhere): the reader stays, and reads again in a second.
      if (!isDatabaseUnavailable(err) && !isBusUnavailable(err)) log.warn({ err, runId }, "could not read a run's events");
      setTimeout(() => wake(), RETRY_READ_MS).unref();
    } finally {
      reading = false;
    }
  };

  const flush = () => {
    while (!done && !reading && pending.length && !flow?.congested) {
      const { e, size } = pending.shift()!;
      pendingBytes -= size;
      deliver(e);
    }
    if (done || reading) return;
    if (pending.length) return awaitDrain();
    if (stale) {
      stale = false;
      void catchUp();
    }
  };
  const awaitDrain = () => {
    if (waitingDrain || !flow) return;
    waitingDrain = true;
    void flow.drained().then(() => {
      waitingDrain = false;
      flush();
    });
  };

  const live = (e: StoredEvent) => {
    if (done) return;
    if (reading) {
      behind = true;
      // Nothing is held for a catching-up reader, but one whose socket takes nothing while the run goes on is as slow.
      if (flow?.congested && (lagBytes += sizeOf(e)) + flow.buffered() > STREAM_BUFFER_CAP_BYTES) finish("slow_reader");
      return;
    }
    const next = (pending.at(-1)?.e.seq ?? last) + 1;
    if (e.seq < next) {
      // A final event at or before `after`: the reader asked from past the end.
      if (isFinalRunEvent(e.kind) && last === after && pending.length === 0) replayEnd(e);
      return;
    }
    if (e.seq > next) return void catchUp();
    if (pending.length === 0 && !flow?.congested) return deliver(e);
    const size = sizeOf(e);
    pending.push({ e, size });
    pendingBytes += size;
    if (flow && pendingBytes + flow.buffered() > STREAM_BUFFER_CAP_BYTES) return finish("slow_reader");
    awaitDrain();
  };

  const wake = () => {
    if (done) return;
    // A reader the socket holds back stays live (its waiting events are not dropped for a catch-up, so a
    // reader that never reads reaches the cap): the wake is heard once the socket has taken them.
    if (pending.length || flow?.congested) {
      stale = true;
      return awaitDrain();
    }
    void catchUp();
  };
  const reader = { event: live, wake };
  const unsubscribe = bus.subscribe(runId, reader);
  // What the run's driver here made lately comes from memory (a reader past it reads the rest from the rows).
  bus.replay(runId, reader);
  // On the run bus a reader of a run driven elsewhere reads once NATS has its subscription (it is woken then), not twice.
  if (readFirst && !done && !bus.confirmingWatch(runId)) void catchUp();
  return () => finish("stopped");
}

/** What a waiting event holds, about (its frame's size). */
function sizeOf(e: StoredEvent): number {
  return Buffer.byteLength(jsonOf(e)) + e.kind.length + 32;
}
