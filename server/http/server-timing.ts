import type { Response } from "express";
import onHeaders from "on-headers";
import { requestScope, type RequestScope, type RequestTiming } from "../request-scope.js";

/**
 * `Server-Timing` on every answer (https://w3c.github.io/server-timing/): where the request's
 * time went until its headers left, so a client or a browser's developer tools can tell the
 * service's own time from the database's and from the end user's machine's.
 *
 *   Server-Timing: total;dur=12.4, svc;desc="service";dur=3.1, db;desc="database";dur=4.2, machine;desc="end user's machine";dur=5.1
 *
 * - `db`: the request's statements, from sent to answered, summed (statements in parallel each count).
 * - `machine`: from a job leaving for the end user's machine to its end, for the jobs the request
 *   itself waited on (a chat completion answered whole); a run started and answered at once has none.
 * - `svc`: the rest (`total` less the two, never below 0).
 * A stream (server-sent events) sends its headers before its first event: its timings are those of
 * the start, up to the moment the stream opened. Durations are milliseconds with one decimal.
 */
export function sendServerTiming(res: Response, scope: RequestScope, startedNs: bigint): void {
  onHeaders(res, () => {
    const total = Number(process.hrtime.bigint() - startedNs) / 1e6;
    const { db, machine } = scope.timing;
    const own = Math.max(0, total - db - machine);
    const f = (ms: number) => (Math.round(ms * 10) / 10).toString();
    res.setHeader(
      "Server-Timing",
      `total;dur=${f(total)}, svc;desc="service";dur=${f(own)}, db;desc="database";dur=${f(db)}, machine;desc="end user's machine";dur=${f(machine)}`,
    );
  });
}

/** Starts timing a database statement for the request running here; call the result when it is answered. */
export function dbTimer(): () => void {
  const scope = requestScope.getStore();
  if (!scope) return noop;
  const t = performance.now();
  return () => {
    scope.timing.db += performance.now() - t;
  };
}

/** Starts timing a wait on the end user's machine for the request whose timings these are (none: nobody waits); call the result when it ends. */
export function machineTimer(timing: RequestTiming | null): () => void {
  if (!timing) return noop;
  const t = performance.now();
  let done = false;
  return () => {
    if (done) return;
    done = true;
    timing.machine += performance.now() - t;
  };
}

const noop = () => {};
