/**
 * Timing instruments for the trace tools (`trace.ts`, `chat-trace.ts`): they
 * wrap the server's objects from outside, so the server code is not changed.
 */
import type { WorkerHub } from "../server/workers/hub.js";

/** The current request's timeline (one at a time only); cleared by the caller. */
export const marks: { t: number; what: string }[] = [];
export const mark = (what: string) => marks.push({ t: performance.now(), what });
/** Every call's duration per step; cleared by the caller. */
export const durations = new Map<string, number[]>();
export const record = (step: string, ms: number) => (durations.get(step) ?? durations.set(step, []).get(step)!).push(ms);

/** Wraps `obj[name]` so each call is marked and timed under `label(args)`. */
export function wrap<T extends object>(obj: T, name: keyof T & string, label: (args: unknown[]) => string = () => name) {
  const fn = (obj as Record<string, unknown>)[name] as (...a: unknown[]) => unknown;
  (obj as Record<string, unknown>)[name] = function (this: unknown, ...args: unknown[]) {
    const l = label(args);
    const started = performance.now();
    const done = () => {
      mark(`< ${l}`);
      record(l, performance.now() - started);
    };
    mark(`> ${l}`);
    const r = fn.apply(this, args);
    if (r && typeof (r as Promise<unknown>).then === "function") return (r as Promise<unknown>).finally(done);
    done();
    return r;
  };
}

/** A SQL call's label: its first words. */
export const sqlLabel = (a: unknown[]) => `sql ${String(a[0]).replace(/\s+/g, " ").trim().slice(0, 48)}`;

/** Marks each job the hub sends to a worker and its events, timing the first event back (`firstLabel`) and the job's end. */
export function traceDispatch(workers: WorkerHub, firstLabel: string) {
  const dispatch = workers.dispatch.bind(workers);
  workers.dispatch = (owner, machineId, job, onEvent) => {
    mark("dispatch job");
    const sent = performance.now();
    let first = true;
    return dispatch(owner, machineId, job, (e, bytes) => {
      mark(`job event ${e.type}`);
      if (first) record(firstLabel, performance.now() - sent);
      first = false;
      if (e.type === "done") record("[job] dispatch -> done", performance.now() - sent);
      onEvent(e, bytes);
    });
  };
}
