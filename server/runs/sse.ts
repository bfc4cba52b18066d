import { PassThrough, type Readable } from "node:stream";
import type { Response } from "express";
import { FINAL_RUN_EVENT_KINDS } from "@svc/contract";
import type { Logger } from "../logger.js";
import type { RunBus } from "./bus.js";
import type { RunStore, StoredEvent } from "./store.js";

/** An idle stream gets a comment this often, so proxies keep it open. */
const KEEP_ALIVE_MS = 15_000;
const FINAL = new Set<string>(FINAL_RUN_EVENT_KINDS);

/**
 * Follows a run's events from just after `after` until its final event: stored
 * events first, then live ones. Every delivery goes through one queue and
 * carries its sequence, so an event is handed over once, in order, with no gap:
 * one that arrives ahead of what was delivered makes the follower catch up from
 * the stored rows first. Returns how to stop following (the run goes on).
 */
export function followRun(
  store: RunStore,
  bus: RunBus,
  log: Logger,
  runId: string,
  after: number,
  onEvent: (e: StoredEvent) => void,
  onEnd: () => void,
  /** False for a run this instance has just started and drives: nothing is stored yet, its events come through the bus (the engine's sweep wakes readers should one have slipped by). */
  readFirst = true,
): () => void {
  let last = after;
  let done = false;
  let queue: Promise<void> = Promise.resolve();

  const deliver = (e: StoredEvent) => {
    if (done || e.seq !== last + 1) return;
    last = e.seq;
    onEvent(e);
    if (FINAL.has(e.kind)) stop();
  };
  const catchUp = async () => {
    while (!done) {
      const rows = await store.events(runId, last);
      for (const e of rows) deliver(e);
      if (rows.length < 500) return;
    }
  };
  const enqueue = (step: () => void | Promise<void>) => {
    queue = queue.then(step).catch((err) => {
      log.warn({ err, runId }, "could not read a run's events");
    });
  };
  const unsubscribe = bus.subscribe(runId, {
    event: (e) => enqueue(() => (e.seq === last + 1 ? deliver(e) : e.seq > last ? catchUp() : undefined)),
    wake: () => enqueue(catchUp),
  });
  function stop() {
    if (done) return;
    done = true;
    unsubscribe();
    onEnd();
  }
  if (readFirst) enqueue(catchUp);
  return stop;
}

/** Starts a `text/event-stream` answer: headers out at once (the run id among them), keep-alive comments while idle. */
export function eventStreamBody(res: Response): { out: PassThrough; end: () => void } {
  res.setHeader("content-type", "text/event-stream; charset=utf-8");
  res.setHeader("cache-control", "no-cache, no-transform");
  res.setHeader("x-accel-buffering", "no");
  res.flushHeaders();
  const out = new PassThrough();
  const keepAlive = setInterval(() => out.write(": keep-alive\n\n"), KEEP_ALIVE_MS);
  keepAlive.unref();
  return {
    out,
    end: () => {
      clearInterval(keepAlive);
      out.end();
    },
  };
}

/** A run's events as `text/event-stream` (`id:` its sequence, `event:` its kind, JSON `data:`); a client that leaves stops the reading, never the run. */
export function runEventStream(store: RunStore, bus: RunBus, log: Logger, runId: string, after: number, res: Response, readFirst = true): Readable {
  const { out, end } = eventStreamBody(res);
  const stop = followRun(store, bus, log, runId, after, (e) => out.write(`id: ${e.seq}\nevent: ${e.kind}\ndata: ${JSON.stringify(e.data)}\n\n`), end, readFirst);
  res.on("close", stop);
  return out;
}
