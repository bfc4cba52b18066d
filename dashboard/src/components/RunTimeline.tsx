import type { ReactNode } from "react";
import type { z } from "zod";
import type { OwnerApproval, OwnerToolCall, StoredRunEvent } from "@svc/contract";
import { sameLocalDay } from "../format/time";
import { Time } from "./Time";

type Event = z.infer<typeof StoredRunEvent>;
type ToolCall = z.infer<typeof OwnerToolCall>;
type Approval = z.infer<typeof OwnerApproval>;

const LIMITS: Record<string, string> = { spend_ceiling: "the plan's spend ceiling", allowance: "the plan's allowance", run_budget: "its budget" };

/** When a steering message reached the run (`user_message`'s `delivery`), in words. */
const DELIVERY: Record<string, string> = { now: "delivered mid-turn", next_turn: "before the next model call" };
/** How a follow-up's agent CLI session went on (`run_started`'s `session`). */
const SESSION: Record<string, string> = { resumed: "its agent CLI session resumed", new: "in a new agent CLI session" };

/** What an event says in a line; tool calls and results show their name and payload, a user's message what they wrote. */
function summary(e: Event): ReactNode {
  const d = e.data as Record<string, unknown>;
  const name = typeof d.name === "string" ? d.name : typeof d.tool === "string" ? d.tool : null;
  switch (e.kind) {
    case "run_started": {
      const more = [typeof d.previousRunId === "string" ? `continuing ${d.previousRunId}` : null, typeof d.session === "string" ? (SESSION[d.session] ?? `session ${d.session}`) : null].filter(Boolean);
      return more.length ? `run started, ${more.join(", ")}` : "run started";
    }
    case "user_message":
      return (
        <>
          Message from the user <span className="tag">{DELIVERY[String(d.delivery)] ?? String(d.delivery ?? "")}</span>: <q className="user-said">{preview(String(d.content ?? ""))}</q>
        </>
      );
    case "session_restarted":
      return `Session restarted in a new agent CLI session (${typeof d.previousRunId === "string" ? `${d.previousRunId}'s` : "the previous run's"} transcript as context): ${String(d.reason ?? "")}`;
    case "tool_call":
      return `Called ${name ?? "a tool"}`;
    case "tool_result":
      return `Result of ${name ?? (typeof d.callId === "string" ? d.callId : "a tool call")}`;
    case "run_paused":
      return `Paused at ${LIMITS[String(d.limit)] ?? String(d.limit)}: ${String(d.message ?? "")}`;
    case "run_resumed":
      return `Resumed (${String(d.reason ?? "").replace(/_/g, " ")}) after ${Math.round(Number(d.pausedMs ?? 0) / 1000)} s`;
    default:
      return e.kind.replace(/_/g, " ");
  }
}

/** One line of the timeline: a stored event, or what the app and the deciders did, from the run's tool calls and approvals. */
interface Entry {
  key: string;
  className: string;
  /** `#seq` of a stored event. */
  seq?: number;
  line: ReactNode;
  at: string | null;
  body?: ReactNode;
}

const DECIDED = { approved: "Approved", denied: "Denied", withdrawn: "Withdrawn" } as const;

/** Who decided an approval, in words: `app`, `machine` and `policy` are the service's names; anything else is the end user's id. */
function decider(by: string | null): string {
  if (by === null || by === "app") return "the app";
  if (by === "machine") return "the end user, on their machine";
  if (by === "policy") return "policy";
  return `user ${by}`;
}

/** A JSON text shown as it reads best: a string as itself, anything else indented (a cut text as it is). */
function readable(json: string, cut: boolean): string {
  if (cut) return json;
  try {
    const v: unknown = JSON.parse(json);
    return typeof v === "string" ? v : JSON.stringify(v, null, 2);
  } catch {
    return json;
  }
}

const kib = (bytes: number) => `${Math.ceil(bytes / 1024)} KiB`;
const preview = (text: string) => (text.length > 100 ? `${text.slice(0, 100)}…` : text).replace(/\s+/g, " ");

/** An event's full data (its box scrolls sideways, so it takes the keyboard's focus); a user's message first as they wrote it. */
function eventBody(e: Event): ReactNode {
  const json = <pre tabIndex={0}>{JSON.stringify(e.data, null, 2)}</pre>;
  if (e.kind !== "user_message" || typeof e.data.content !== "string") return json;
  return (
    <>
      <blockquote className="user-message">{e.data.content}</blockquote>
      {json}
    </>
  );
}

function answerEntry(c: ToolCall): Entry {
  const text = readable(c.result!, c.resultTruncated);
  return {
    key: `answer-${c.callId}`,
    className: `event event-app-answer${c.isError ? " event-error" : ""}`,
    at: c.answeredAt,
    line: (
      <>
        App answered {c.name}
        {c.isError && <span className="tag tag-error">error</span>}: <span className="muted">{preview(text)}</span>
      </>
    ),
    body: (
      <>
        {c.resultTruncated && (
          <p className="notice notice-warning">
            Cut: the answer is {kib(c.resultBytes ?? 0)}, the inspector shows its first {kib(new TextEncoder().encode(c.result!).length)}.
          </p>
        )}
        <pre tabIndex={0}>{text}</pre>
      </>
    ),
  };
}

function decisionEntry(a: Approval): Entry {
  return {
    key: `decision-${a.callId}`,
    className: `event event-decision event-decision-${a.decision}`,
    at: a.decidedAt,
    line: (
      <>
        {DECIDED[a.decision!]} by {decider(a.decidedBy)} <span className="muted">({a.tool}{a.reason ? `: ${a.reason}` : ""})</span>
      </>
    ),
    body: <pre tabIndex={0}>{JSON.stringify(a, null, 2)}</pre>,
  };
}

/**
 * The run's stored events in order, each with its full data one click away (a message the user sent the
 * run while it worked, `user_message`, where it reached the run: what they wrote and when it went in), and
 * among them, at their times: the app's answer to each tool call ("App answered …", an error answer marked),
 * each approval decision and who made it, and while the run lives what it still waits for.
 *
 * Placed at its time among the events, and never before the event that asked for it (times equal to the
 * millisecond keep the events' own order).
 */
export function RunTimeline({ events, toolCalls, approvals, live, startedAt }: { events: Event[]; toolCalls: ToolCall[]; approvals: Approval[]; live: boolean; startedAt?: string }) {
  const asked = (match: (d: Record<string, unknown>) => boolean, kind: string) => events.findIndex((e) => e.kind === kind && match(e.data));
  /** Where an entry goes: before the first event after its time, and after the event asking for it. */
  const placed: { entry: Entry; before: number }[] = [];
  const place = (entry: Entry, askedAt: number) => {
    const time = entry.at ? Date.parse(entry.at) : Infinity;
    const later = events.findIndex((e) => Date.parse(e.at) > time);
    placed.push({ entry, before: Math.max(askedAt + 1, later === -1 ? events.length : later) });
  };
  for (const c of toolCalls) {
    const at = asked((d) => d.callId === c.callId, "tool_call");
    if (c.answeredAt) place(answerEntry(c), at);
    else
      place(
        {
          key: `waiting-${c.callId}`,
          className: "event event-waiting",
          at: null,
          line: live ? <>Waiting for the app to answer {c.name}</> : <>{c.name} was never answered (the run ended)</>,
        },
        at === -1 ? events.length : at,
      );
  }
  for (const a of approvals) {
    const at = asked((d) => d.approvalId === a.callId || d.callId === a.callId, "approval_request");
    if (a.decision && a.decidedAt) place(decisionEntry(a), at);
    else if (live) place({ key: `undecided-${a.callId}`, className: "event event-waiting", at: null, line: <>Waiting for a decision on {a.tool}</> }, at === -1 ? events.length : at);
  }
  placed.sort((x, y) => x.before - y.before || (x.entry.at ? Date.parse(x.entry.at) : Infinity) - (y.entry.at ? Date.parse(y.entry.at) : Infinity));

  const entries: Entry[] = [];
  let next = 0;
  for (let i = 0; i <= events.length; i++) {
    while (next < placed.length && placed[next].before === i) entries.push(placed[next++].entry);
    const e = events[i];
    if (e) entries.push({ key: `event-${e.seq}`, seq: e.seq, className: `event event-${e.kind}`, at: e.at, line: summary(e), body: eventBody(e) });
  }

  return (
    <section aria-labelledby="timeline-title">
      <h2 id="timeline-title">Event timeline</h2>
      {entries.length === 0 ? (
        <p>No events stored.</p>
      ) : (
        <ol className="timeline">
          {entries.map((e) => (
            <li key={e.key} className={e.className}>
              {e.body ? (
                <details>
                  <summary>
                    <TimelineLine entry={e} startedAt={startedAt} />
                  </summary>
                  {e.body}
                </details>
              ) : (
                <TimelineLine entry={e} startedAt={startedAt} />
              )}
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}

/** An entry's line: its sequence, what happened, and when to the second (the time of day alone on the run's first day). */
function TimelineLine({ entry, startedAt }: { entry: Entry; startedAt?: string }) {
  return (
    <>
      {entry.seq !== undefined && <span className="muted">#{entry.seq} </span>}
      {entry.line} {entry.at && <Time at={entry.at} style={startedAt && sameLocalDay(startedAt, entry.at) ? "clock" : "full"} className="event-time" />}
    </>
  );
}
