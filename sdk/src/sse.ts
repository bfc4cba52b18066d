import { createParser } from "eventsource-parser";
import { RUN_EVENT_KINDS, RunEvent as RunEventSchema } from "@svc/contract";
import type { RunEvent } from "./wire.js";
import { MalformedEventError } from "./errors.js";

/** One frame of a `text/event-stream`, as sent: `id:`, `event:` and `data:`. */
export interface SseFrame {
  id: string | undefined;
  event: string | undefined;
  data: string;
}

/** A frame of a run's stream: `id` is the run's event sequence, `data` the event (null: a kind this SDK does not know). */
export interface RunEventFrame {
  id: number | null;
  event: string;
  data: RunEvent | null;
}

/**
 * The frames of an event-stream body, as they complete. Comment lines
 * (`: keep-alive`) are dropped by the parser; a frame cut off by the end of
 * the body is dropped too (SSE dispatches a frame only at its blank line), so a
 * dropped connection never yields half an event. Leaving the loop early closes
 * the body, and with it the connection, as does `signal` aborting.
 */
export async function* readSse(body: ReadableStream<Uint8Array>, signal?: AbortSignal, idleMs?: number): AsyncGenerator<SseFrame> {
  const ready: SseFrame[] = [];
  const parser = createParser({
    onEvent: (e) => ready.push({ id: e.id, event: e.event, data: e.data }),
    // Unknown fields and bad `retry:` lines are the server's business, not a reason to stop reading.
    onError: () => {},
  });
  const decoder = new TextDecoder();
  const reader = body.getReader();
  // Stop at once on abort, even with a `fetch` that does not end the body on its signal.
  const stop = () => void reader.cancel(signal?.reason).catch(() => {});
  signal?.addEventListener("abort", stop, { once: true });
  // A connection silent for longer than the server's keep-alives is half-open: end it, so the caller re-attaches.
  let idle: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    if (idleMs === undefined) return;
    clearTimeout(idle);
    idle = setTimeout(() => void reader.cancel(new Error("idle")).catch(() => {}), idleMs);
  };
  try {
    for (;;) {
      if (signal?.aborted) return;
      arm();
      const { done, value } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
      while (ready.length) yield ready.shift()!;
    }
    parser.feed(decoder.decode());
    while (ready.length) yield ready.shift()!;
  } finally {
    clearTimeout(idle);
    signal?.removeEventListener("abort", stop);
    await reader.cancel().catch(() => {});
  }
}

const KNOWN_KINDS = new Set<string>(RUN_EVENT_KINDS);

/**
 * A frame's run event, validated against the contract. A kind this SDK does not
 * know (a newer service) gives `data: null`, to be skipped; a known kind that does
 * not match its schema, or data that is not JSON, throws `MalformedEventError`.
 */
export function parseRunEventFrame(frame: SseFrame): RunEventFrame {
  const id = frame.id !== undefined && /^\d+$/.test(frame.id) ? Number(frame.id) : null;
  let json: unknown;
  try {
    json = JSON.parse(frame.data);
  } catch {
    throw new MalformedEventError(`svc: run event ${frame.id ?? "(no id)"} is not JSON: ${frame.data.slice(0, 200)}`);
  }
  const kind = typeof json === "object" && json !== null ? (json as { kind?: unknown }).kind : undefined;
  if (typeof kind !== "string" || !KNOWN_KINDS.has(kind)) return { id, event: frame.event ?? String(kind), data: null };
  const parsed = RunEventSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(event)"}: ${i.message}`).join("; ");
    throw new MalformedEventError(`svc: the ${kind} event ${frame.id ?? "(no id)"} does not match the contract: ${issues}`);
  }
  return { id, event: frame.event ?? kind, data: parsed.data };
}

/** The run events of an event-stream body, in order, each with its sequence number. */
export async function* readRunEvents(body: ReadableStream<Uint8Array>, signal?: AbortSignal, idleMs?: number): AsyncGenerator<RunEventFrame> {
  for await (const frame of readSse(body, signal, idleMs)) yield parseRunEventFrame(frame);
}
