import { createParser } from "eventsource-parser";

export interface SseFrame {
  id: string | undefined;
  event: string | undefined;
  data: Record<string, unknown>;
}

/** The frames of a `text/event-stream` answer as they come (raw HTTP, no SDK). */
export async function* sseFrames(res: Response): AsyncGenerator<SseFrame> {
  const queue: SseFrame[] = [];
  const parser = createParser({ onEvent: (e) => queue.push({ id: e.id, event: e.event, data: JSON.parse(e.data) as Record<string, unknown> }) });
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    while (queue.length) yield queue.shift()!;
  }
}

/** Each turn's text as the app shows it: a restarted turn's text so far dropped (`turn_restarted`). */
export function textOf(frames: SseFrame[]): Map<number, string> {
  const text = new Map<number, string>();
  for (const f of frames) {
    if (f.event === "turn_restarted") text.set(Number(f.data.turn), "");
    if (f.event === "text_delta") text.set(Number(f.data.turn), (text.get(Number(f.data.turn)) ?? "") + String(f.data.text));
  }
  return text;
}
