import type { z } from "zod";
import type { StoredRunEvent } from "@svc/contract";
import { formatTime } from "../format/time";

type Event = z.infer<typeof StoredRunEvent>;

/** What an event says in a line; tool calls and results show their name and payload. */
function summary(e: Event): string {
  const d = e.data as Record<string, unknown>;
  const name = typeof d.name === "string" ? d.name : typeof d.tool === "string" ? d.tool : null;
  switch (e.kind) {
    case "tool_call":
      return `Called ${name ?? "a tool"}`;
    case "tool_result":
      return `Result of ${name ?? (typeof d.callId === "string" ? d.callId : "a tool call")}`;
    default:
      return e.kind.replace(/_/g, " ");
  }
}

/** The run's stored events in order, each with its full data one click away. */
export function RunTimeline({ events }: { events: Event[] }) {
  return (
    <section aria-labelledby="timeline-title">
      <h2 id="timeline-title">Event timeline</h2>
      {events.length === 0 ? (
        <p>No events stored.</p>
      ) : (
        <ol className="timeline">
          {events.map((e) => (
            <li key={e.seq} className={`event event-${e.kind}`}>
              <details>
                <summary>
                  <span className="muted">#{e.seq}</span> {summary(e)} <time dateTime={e.at}>{formatTime(e.at)}</time>
                </summary>
                <pre>{JSON.stringify(e.data, null, 2)}</pre>
              </details>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}
