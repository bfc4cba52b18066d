import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type SpanContext } from "@opentelemetry/api";
import { JOB_SPANS_MAX, type JobSpanRecord } from "@svc/contract";
import { CONTENT_ATTRIBUTES } from "./genai.js";
import { tracer, tracingOn } from "./tracing.js";

/** Per span from a machine: attributes kept, and the characters of each string value. */
const MACHINE_ATTRIBUTES = 32;
const MACHINE_VALUE_CHARS = 256;
const KEY = /^[A-Za-z][A-Za-z0-9_.-]{0,127}$/;

/**
 * Makes the span records a machine sent for one of its jobs real spans, under the
 * job's own span (`parent`, the service's span whose `traceparent` the job frame
 * carried) or under another record of the same batch: a record names no trace and
 * no span id, so a machine can put spans only inside the job it ran. Bounded: at
 * most `JOB_SPANS_MAX` spans, 32 attributes each, string values cut to 256
 * characters, no content attribute, nothing in the service's own `svc.` namespace
 * but `svc.worker.*`. Each says where it came from (`svc.origin` = `machine`,
 * `svc.machine.id`). Times are the machine's clock moved by the difference between
 * its `sentAt` and this instance's clock when they came, then kept within the job's
 * span and now.
 */
export function recreateMachineSpans(parent: SpanContext, parentStartMs: number, machineId: string | null, sentAt: number, records: JobSpanRecord[]): number {
  if (!tracingOn()) return 0;
  const now = Date.now();
  const shift = now - sentAt;
  const within = (t: number) => Math.min(now, Math.max(parentStartMs, t + shift));
  const root = trace.setSpanContext(ROOT_CONTEXT, parent);
  const placed = new Map<string, Context>();
  let made = 0;
  for (const r of records.slice(0, JOB_SPANS_MAX)) {
    const start = within(r.start);
    const end = Math.max(start, within(r.end));
    const under = (r.parent !== undefined && placed.get(r.parent)) || root;
    const span = tracer().startSpan(r.name, { kind: r.kind === "client" ? SpanKind.CLIENT : SpanKind.INTERNAL, startTime: start, attributes: { ...machineAttributes(r.attributes), "svc.origin": "machine", ...(machineId ? { "svc.machine.id": machineId } : {}) } }, under);
    if (r.status?.code === "error") span.setStatus({ code: SpanStatusCode.ERROR, ...(r.status.message ? { message: r.status.message.slice(0, 512) } : {}) });
    else if (r.status?.code === "ok") span.setStatus({ code: SpanStatusCode.OK });
    span.end(end);
    made++;
    if (r.id !== undefined && !placed.has(r.id)) placed.set(r.id, trace.setSpan(ROOT_CONTEXT, span));
  }
  return made;
}

function machineAttributes(attributes: JobSpanRecord["attributes"]): Attributes {
  const out: Attributes = {};
  let n = 0;
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (n >= MACHINE_ATTRIBUTES) break;
    if (!KEY.test(key) || CONTENT_ATTRIBUTES.has(key)) continue;
    if (key.startsWith("svc.") && !key.startsWith("svc.worker.")) continue;
    out[key] = typeof value === "string" ? value.slice(0, MACHINE_VALUE_CHARS) : value;
    n++;
  }
  return out;
}
