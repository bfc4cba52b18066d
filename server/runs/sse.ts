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
 * A run's events as `text/event-stream`, from just after `after` until the run
 * ends: stored events first, then live ones. Every write goes through one queue
 * and carries its sequence, so an event is sent once, in order, with no gap:
 * one that arrives ahead of what was sent makes the reader catch up from the
 * stored rows first. A client that leaves stops the reading, never the run.
 */
export function runEventStream(store: RunStore, bus: RunBus, log: Logger, runId: string, after: number, res: Response): Readable {
  res.setHeader("content-type", "text/event-stream; charset=utf-8");
  res.setHeader("cache-control", "no-cache, no-transform");
  res.setHeader("x-accel-buffering", "no");
  res.flushHeaders();
  const out = new PassThrough();
  let last = after;
  let done = false;
  let queue: Promise<void> = Promise.resolve();

  const send = (e: StoredEvent) => {
    if (done || e.seq !== last + 1) return;
    last = e.seq;
    out.write(`id: ${e.seq}\nevent: ${e.kind}\ndata: ${JSON.stringify(e.data)}\n\n`);
    if (FINAL.has(e.kind)) finish();
  };
  const catchUp = async () => {
    while (!done) {
      const rows = await store.events(runId, last);
      for (const e of rows) send(e);
      if (rows.length < 500) return;
    }
  };
  const enqueue = (step: () => void | Promise<void>) => {
    queue = queue.then(step).catch((err) => {
      log.warn({ err, runId }, "run stream could not read events");
    });
  };
  const unsubscribe = bus.subscribe(runId, {
    event: (e) => enqueue(() => (e.seq === last + 1 ? send(e) : e.seq > last ? catchUp() : undefined)),
    wake: () => enqueue(catchUp),
  });
  const keepAlive = setInterval(() => out.write(": keep-alive\n\n"), KEEP_ALIVE_MS);
  keepAlive.unref();
  function finish() {
    if (done) return;
    done = true;
    clearInterval(keepAlive);
    unsubscribe();
    out.end();
  }
  // The client went away (or the answer ended): stop reading; the run goes on.
  res.on("close", finish);
  enqueue(catchUp);
  return out;
}
