/**
 * What instances tell each other about runs through Postgres notifications, and
 * how it is read back. A payload is at most 8,000 bytes (Postgres's limit): what
 * does not fit is left out, and the receiver reads it from the database instead.
 * A payload of a shape not known here only makes the receiver read.
 *
 *  - `svc_run_input` (a wake of a run's driver): the run id, and the answer just stored when short.
 *  - `svc_run_event` (a step stored): the run id, the instance that wrote it, and the step's events when short.
 */
import type { Answer } from "./driver.js";
import type { StoredEvent } from "./run-rows.js";

/** An answer carried in a wake's notification, at most this long; a longer one is read by the driver. */
const WAKE_ANSWER_BYTES = 7_000;

/**
 * What wakes a run's driver on another instance: the run id, and the answer
 * stored (when short), so the driver need not read it back. The notification is
 * sent with the answer's commit, so what it says is stored.
 */
export function wakePayload(runId: string, answer: Answer): string {
  const json = JSON.stringify(answer);
  return Buffer.byteLength(json) <= WAKE_ANSWER_BYTES ? `${runId} ${json}` : runId;
}

/** A wake's notification read back: the run id, and its answer when it came with one of a known shape (else the driver reads). */
export function readWake(payload: string): { runId: string; answer?: Answer } {
  const at = payload.indexOf(" ");
  if (at < 0) return { runId: payload };
  const runId = payload.slice(0, at);
  try {
    const a = JSON.parse(payload.slice(at + 1)) as Answer;
    const known =
      (a.kind === "tool" && typeof a.callId === "string" && typeof a.isError === "boolean" && "result" in a) ||
      (a.kind === "approval" && typeof a.approvalId === "string" && (a.decision === "allow" || a.decision === "deny") && (a.reason === null || typeof a.reason === "string"));
    return known ? { runId, answer: a } : { runId };
  } catch {
    return { runId };
  }
}

/**
 * A stored step's events carried in its notification, at most this many bytes of JSON (as
 * Postgres prints the `jsonb`): the SQL of the step's statement (`run-writer.ts`) builds the
 * payload `<run id> <writer> <events>`, or `<run id> <writer>` when they are longer.
 */
export const NOTICE_EVENTS_BYTES = 7_000;

/**
 * A step's notification read back: the run, the instance that stored it, and its events when
 * they came, each `{ seq, kind, data }` (else the readers here read the rows). The events are
 * stored (the notification is sent with the step's commit), so a reader takes them as it takes
 * its driver's: in order, one seen already ignored, a gap read from the rows. `withEvents`
 * false reads the run and the writer only (the events are parsed only where someone reads).
 */
export function readEventNotice(payload: string, withEvents = true): { runId: string; writer: string; events?: StoredEvent[] } {
  const a = payload.indexOf(" ");
  if (a < 0) return { runId: payload, writer: "" };
  const runId = payload.slice(0, a);
  const b = payload.indexOf(" ", a + 1);
  if (b < 0) return { runId, writer: payload.slice(a + 1) };
  const writer = payload.slice(a + 1, b);
  if (!withEvents) return { runId, writer };
  try {
    const events = JSON.parse(payload.slice(b + 1)) as unknown;
    const known =
      Array.isArray(events) &&
      events.length > 0 &&
      events.every((e: StoredEvent, i) => Number.isInteger(e?.seq) && e.seq > 0 && (i === 0 || e.seq === events[i - 1].seq + 1) && typeof e.kind === "string" && typeof e.data === "object" && e.data !== null && e.data.kind === e.kind);
    return known ? { runId, writer, events: events as StoredEvent[] } : { runId, writer };
  } catch {
    return { runId, writer };
  }
}
