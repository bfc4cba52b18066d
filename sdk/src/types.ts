import type { RequestOptions } from "./client.js";
import type { OnSessionLost, RouteKind, RunBudget, RunEvent, RunLimits, RunRoute, RunStatus } from "./wire.js";

/** One run event of the stream, by its `kind`. */
export type RunEventOf<K extends RunEvent["kind"]> = Extract<RunEvent, { kind: K }>;

/** What a tool's `run` gets besides its arguments. */
export interface ToolContext {
  runId: string;
  callId: string;
  /** Aborts when the driver stops (the run ended, or the caller stopped reading): the result is no longer wanted. */
  signal: AbortSignal;
}

/** An app tool: its definition is sent to the service, its `run` stays in the app and answers the run's calls. */
export interface RunTool {
  name: string;
  description?: string;
  /** JSON Schema of the arguments. */
  parameters?: Record<string, unknown>;
  /** Each call first asks the app for an approval (`onApproval`). */
  needsApproval?: boolean;
  /** Answers a call: the return value is the tool result (JSON); a thrown error is sent as an error result. */
  run?: (args: unknown, ctx: ToolContext) => unknown | Promise<unknown>;
}

/**
 * An approval the run waits for: a tool marked `needsApproval`, or an agent
 * runtime's permission request. Its `approval_request` event (for `what: "tool"`,
 * `callId` is the call that runs once allowed), with the run's id.
 */
export interface ApprovalRequest extends Omit<RunEventOf<"approval_request">, "kind" | "deadlineAt" | "arguments"> {
  /** Always given to the handler (the event's, as the model or runtime wrote them). */
  arguments: unknown;
  runId: string;
}

/** `true` or `{ decision: "allow" }` grants; anything else denies (with its `reason`). */
export type ApprovalAnswer = boolean | { decision: "allow" | "deny" | (string & {}); reason?: string };
export type ApprovalHandler = (req: ApprovalRequest) => ApprovalAnswer | Promise<ApprovalAnswer>;

/** What the app is handed when the user has no reachable compute (`serve_in_app`): the run is counted, the app serves it. */
export interface Handback {
  runId: string;
  user: string;
  prompt: string;
  model: string;
  system?: string;
  tools: RunTool[];
  /** On a follow-up: the run whose conversation this one continues (the app serves it with that conversation). */
  previousRunId?: string;
  /** The caller's `signal`, if any. */
  signal?: AbortSignal;
}

/** What the app's own serving of a handed-back run produced and used; the usage is reported to the service. */
export interface ServedInApp {
  output: string;
  usage: { inputTokens: number; outputTokens: number; model?: string; costMicros?: number };
}

export interface RunCreateParams {
  /** The app's id for its end user. */
  user: string;
  prompt: string;
  /**
   * `auto` (default) lets the service pick; otherwise a model or `<runtime>/<model>` alias.
   * On a follow-up (`previousRunId`), omitted: the model the previous run asked for.
   */
  model?: string;
  /** On a follow-up, omitted: the previous run's; given: it replaces it. */
  system?: string;
  /** On a follow-up, omitted: the previous run's definitions are kept (the SDK's `followUp` passes the run's own tools on to answer them); given: they replace them. */
  tools?: RunTool[];
  route?: { prefer: RouteKind[] };
  limits?: RunLimits;
  /** A cap on this run (integer micros as a string, and/or tokens): reached between turns, the run pauses until `runs.raiseBudget`. */
  budget?: RunBudget;
  metadata?: Record<string, string>;
  /**
   * Continue the conversation of this ended run (same user; one still active is `409 run_active`).
   * On a model runtime the stored conversation goes first; on an agent CLI the same CLI session, on
   * the same machine, is resumed. `run.followUp(prompt)` sets it for you.
   */
  previousRunId?: string;
  /**
   * On a follow-up of an agent CLI run whose session cannot be continued: `refuse` (the default)
   * answers `409 session_unavailable` at the start, or fails the run `session_lost`; `restart`
   * starts a fresh session with the stored transcript as context (a `session_restarted` event says so).
   */
  onSessionLost?: OnSessionLost;
  /** Answers `approval_request` events. Without it every approval is denied. */
  onApproval?: ApprovalHandler;
  /** Serves the run in the app on `serve_in_app`. Without it that answer throws `ServeInAppError`. */
  serveInApp?: (handback: Handback) => Promise<ServedInApp>;
  /** Sent as `Idempotency-Key` with the start (default: a random one): the same on each try of this start. */
  idempotencyKey?: string;
  /**
   * Stops this client's reading (and its tool calls). It does not cancel the run:
   * a dropped stream never does. Use `cancel()` for that.
   */
  signal?: AbortSignal;
}

/**
 * `run.followUp(prompt, options)`: a create's parameters but `user`, `prompt` and `previousRunId`
 * (the run's own user, the new prompt, the run's id). Omitted, `tools` and `onApproval` are the
 * run's own (the service keeps the previous run's tool definitions; the SDK answers them with the
 * same `run` functions); `system` and `model` are the previous run's (kept by the service).
 */
export type RunFollowUpOptions = Omit<RunCreateParams, "user" | "prompt" | "previousRunId">;

/** `run.send(text, options)`: the call's options; `idempotencyKey` (default: a random one) makes a repeat deliver one message. */
export type RunSendOptions = RequestOptions;

export interface RunEventsOptions {
  /** Only the events after this sequence number (the `id` of the last event seen). Default: all of them. */
  after?: number;
  /** The run's user, sent with every answer (the service checks it matches). */
  user?: string;
  /**
   * Tools and approvals to answer while re-attached. Each `tool_call` and
   * `approval_request` delivered is answered, so pass `after` to skip those
   * already answered (an answer given twice is refused and ignored, but the tool
   * would run twice).
   */
  tools?: RunTool[];
  onApproval?: ApprovalHandler;
  signal?: AbortSignal;
}

export type RunStatusFinal = Exclude<RunStatus, "queued" | "running" | "waiting">;

/** How a run ended, as this client saw it. */
export interface RunResult {
  runId: string;
  status: RunStatusFinal;
  /** The final output; for a failed run, the text streamed before it failed. */
  output: string;
  usage: { inputTokens: number; outputTokens: number };
  /** Null when the stream was re-attached after `run_started` and the run could not be read. */
  route: RunRoute | null;
  machineId: string | null;
  runtime: string | null;
  /** e.g. `end_turn`, `max_turns`; `cancelled` for a cancelled run, `serve_in_app` for a handed-back one. */
  stopReason: string | null;
  error?: { code: string; message: string };
}

