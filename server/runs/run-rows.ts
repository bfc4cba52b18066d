import type { ApprovalKind, ChatMessage, Environment, JobUsage, OnSessionLost, RunEvent, RunEventOf, RunLimits, RunRoute, RunSource, RunStatus, RuntimeBilling, RuntimeKind, Tool } from "@svc/contract";
import type { CostClassValue } from "../ledger/metering.js";

/** A run's rows as the store writes and reads them: the run, its events, the calls, approvals and ledger rows a step adds, and what its driver waits on. */

export const ACTIVE_STATUSES = ["queued", "running", "waiting", "paused"] as const;
/** The same, as an SQL list. */
export const ACTIVE_STATUSES_SQL = ACTIVE_STATUSES.map((s) => `'${s}'`).join(", ");

/** A run's model conversation as stored, in a statement on `runs`: the row's own when it has one (a run begun before `run_messages`, or while an instance of a version before it was alive), else its messages in order. */
export const STORED_CONVERSATION_SQL = `COALESCE(runs.transcript, (SELECT jsonb_agg(m.message ORDER BY m.n) FROM run_messages m WHERE m.run_id = runs.id))`;

/** A run of one model turn whose caller owns the loop (chat completions, responses). */
export const isModelTurn = (source: RunSource): boolean => source !== "runs";

export interface RunRow {
  id: string;
  source: RunSource;
  app_id: string;
  environment: Environment;
  end_user_id: string;
  model: string;
  request: {
    prompt: string;
    system?: string;
    tools?: Tool[];
    spendCeilingMicros?: string;
    spendPeriod?: string;
    /** The run's budget as it started (`runs.budget` holds it once raised). */
    budget?: { maxMicros?: string; maxTokens?: number };
    /**
     * Known at the start: nothing can pause this run, so its driver does not look at its limits between
     * turns until a budget is set on it. (Set after the row is written for a routed run, so only its
     * driver on the starting instance has it; another instance's driver looks once to learn it.)
     */
    unlimited?: boolean;
    /** Why the budget may never be reached as given (said in `run_started`). */
    budgetNote?: string | null;
    runtimeKind?: RuntimeKind;
    billing?: RuntimeBilling | null;
    limits?: RunLimits;
    /** The trace that started the run, when tracing was on (server/telemetry/spans.ts `RunOrigin`). */
    otel?: { traceparent: string; user?: string };
    /** The model asked for (`auto`, a model, an alias), before routing chose what serves it. */
    model?: string;
    /** The run whose conversation this one continues (`previousRunId`). */
    previousRunId?: string;
    /** On an agent CLI: the CLI's session on the machine (`resume`: the previous run's, continued there). */
    session?: { id: string; resume: boolean };
    /** What to do when the session cannot be continued (default `refuse`). */
    onSessionLost?: OnSessionLost;
    /** The conversation before this run's prompt (a follow-up's, without its system prompt): a model run's first messages, or an agent CLI's context when its session begins afresh. */
    history?: ChatMessage[];
    /** Set when the start already knew the previous run's session could not be continued (`onSessionLost: restart`): why. */
    sessionRestarted?: string;
  };
  status: RunStatus;
  route_kind: RunRoute | null;
  machine_id: string | null;
  runtime_name: string | null;
  turns: number;
  /** The model conversation stored so far: the row's own (`runs.transcript`), else its `run_messages` in order; null: none yet. */
  transcript: ChatMessage[] | null;
  agent_state: AgentState | null;
  output: string | null;
  /** int8: a string from Postgres, a bigint from PGlite. */
  input_tokens: string | number | bigint;
  output_tokens: string | number | bigint;
  last_seq: number;
  cancel_requested_at: Date | null;
  cancel_reason: string | null;
  /** Since when the run is paused at a limit (null: it is not). */
  paused_at: Date | null;
}

/** A run event as stored: its sequence, its kind, and the event itself (`data.kind` is `kind`). */
export interface StoredEvent {
  seq: number;
  kind: RunEvent["kind"];
  data: RunEvent;
}

/**
 * Where an agent run stands with its job on the machine, stored with each of its
 * writes: after a lost link the driver that takes the run (on any instance) resumes
 * the job from event `n` and knows what it still waits on.
 */
export interface AgentState {
  /** Empty while the job waits for a slot on the machine (never sent): a takeover sends it afresh. */
  jobId: string;
  /** The job's events up to this number are in the run's stored events. */
  n: number;
  /** When the job was first sent (epoch ms): its deadline (`run_timeout`) runs from then, through takeovers. */
  sentAt?: number;
  /** Open permission requests: approval id → the CLI's request id, and the deadline (epoch ms). */
  asked: Record<string, { requestId: string; deadline: number }>;
  /** Open calls of the app's tools, by the service's call id: the worker's id, the tool, its arguments, an approval it waits on, the deadline. */
  calls: Record<string, { workerId: string; name: string; args: unknown; approvalId?: string; deadline: number }>;
  /** Model calls still open, as their partial reports said them: counted by whoever ends the run if they never end. */
  open?: Record<string, JobUsage>;
  /**
   * The answers passed on to the CLI lately (`permission`: approval id → the CLI's request id;
   * `tool`: call id → the worker's id; `denied`: a tool call's approval id → the worker's id):
   * sent again after a resume, since one sent just before the link died may never have arrived.
   */
  relayed?: { kind: "permission" | "tool" | "denied"; id: string; to: string }[];
  /** Ledger rows written for the run's model calls, and their tokens. */
  rows: number;
  written: { inputTokens: number; outputTokens: number; cacheReadTokens: number; cacheWriteTokens: number };
}

export interface RunPatch {
  status?: Exclude<RunStatus, "handed_back">;
  turns?: number;
  /** Messages added to the run's conversation: `messages[i]` is its message number `from + i` (`run_messages`, or the row's whole conversation: `run-writer.ts`). */
  transcript?: { from: number; messages: ChatMessage[] };
  agentState?: AgentState;
  output?: string;
  addInputTokens?: number;
  addOutputTokens?: number;
  stopReason?: string;
  error?: { code: string; message: string };
  finished?: boolean;
  /** The run paused: its `run_paused` event's data, kept on its row (`lastPause` reads it there, wherever its events are). */
  pause?: RunEventOf<"run_paused">;
}

export interface NewToolCall {
  call_id: string;
  name: string;
  arguments: unknown;
  deadline_at: string;
}
export interface NewApproval {
  approval_id: string;
  kind: ApprovalKind;
  request: unknown;
  deadline_at: string;
}
export interface NewUsageRow {
  cost_class: CostClassValue;
  kind: string;
  input_tokens: number;
  output_tokens: number;
  /** Input tokens read from / written to the provider's prompt cache (an agent CLI reports them), not in `input_tokens`. */
  cache_read_tokens?: number;
  cache_write_tokens?: number;
  amount_micros: number;
  period: string;
  unique_key: string;
}

export interface Writes {
  events?: StoredEvent[];
  patch?: RunPatch;
  toolCalls?: NewToolCall[];
  approvals?: NewApproval[];
  usage?: NewUsageRow[];
  /** User messages handed to the agent in this write, with the seq of their `user_message` event: delivered once. */
  delivered?: { message_id: string; seq: number }[];
}

export interface RunInputs {
  cancel: { reason: string | null } | null;
  /** User messages added while the run works (steering), not handed to the agent yet, in the order they came. */
  messages?: PendingMessage[];
  /** The run's budget now (raised by the app, or as it started); null: none. */
  budget?: { maxMicros?: string; maxTokens?: number } | null;
  toolCalls: Map<string, AnsweredCall>;
  approvals: Map<string, AnsweredApproval>;
}
export interface PendingMessage {
  message_id: string;
  content: string;
}
export interface AnsweredCall {
  call_id: string;
  result: unknown;
  is_error: boolean | null;
  answered: boolean;
  deadline_at: string;
}
export interface AnsweredApproval {
  approval_id: string;
  request: { callId?: string; tool: string; arguments?: unknown; requestId?: string };
  decision: string | null;
  reason: string | null;
  answered: boolean;
  deadline_at: string;
}

const eventJson = new WeakMap<StoredEvent, string>();

/**
 * An event's data as JSON, made once per event however many use it (the bus's
 * memory of the run, each reader's SSE frame and its pace): an event is never
 * changed once handed over.
 */
export function jsonOf(e: StoredEvent): string {
  let json = eventJson.get(e);
  if (json === undefined) eventJson.set(e, (json = JSON.stringify(e.data)));
  return json;
}
