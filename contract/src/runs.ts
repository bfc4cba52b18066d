import { z } from "zod";
import { CostClass, IsoTime, RouteKind, RunRoute, RuntimeBilling, Standing, UserId } from "./common.js";

/** An app tool the run may call. The model sees `name`, `description` and `parameters`. */
export const Tool = z.object({
  name: z.string().min(1).max(64).regex(/^[a-zA-Z0-9_-]+$/, "letters, digits, `_` and `-`"),
  description: z.string().max(4096).optional(),
  parameters: z.record(z.unknown()).optional().describe("JSON Schema of the tool's arguments."),
  needsApproval: z.boolean().optional().describe("Each call first asks the app for an approval."),
});
export type Tool = z.infer<typeof Tool>;

export const RunLimits = z.object({
  maxTurns: z.number().int().min(1).max(100).optional().describe("Model turns at most (default 20)."),
  toolResultTimeoutMs: z.number().int().min(1000).max(3_600_000).optional().describe("Deadline for each tool result (default 10 min)."),
  approvalTimeoutMs: z.number().int().min(1000).max(3_600_000).optional().describe("Deadline for each approval (default 10 min)."),
  turnTimeoutMs: z.number().int().min(1000).max(3_600_000).optional().describe("Deadline for each model turn on the user's machine (default 10 min); passed: `turn_timeout`."),
  runTimeoutMs: z.number().int().min(1000).max(86_400_000).optional().describe("Deadline for an agent CLI's whole run (default 60 min); passed: `run_timeout`."),
});
export type RunLimits = z.infer<typeof RunLimits>;

/**
 * Why a run failed (`run_failed.stopReason`, `GET /v1/runs/:id`'s `stopReason`):
 * every reason the service gives. The wire field stays a string, so a client
 * should treat a value it does not know as a failure of another kind.
 */
export const RUN_FAILURE_REASONS = [
  "max_turns",
  "tool_result_timeout",
  "approval_timeout",
  "spend_ceiling",
  "worker_lost",
  "runtime_error",
  "internal_error",
  "limit_exceeded",
  "conversation_too_large",
  "turn_timeout",
  "run_timeout",
  "compute_busy",
  "usage_limit_reached",
  "pause_expired",
  "session_lost",
] as const;
export const RunFailureReason = z.enum(RUN_FAILURE_REASONS);
export type RunFailureReason = z.infer<typeof RunFailureReason>;

/** Integer micros written as a decimal string (exact at any size). */
export const MicrosString = z.string().regex(/^\d{1,18}$/, "integer micros as a decimal string, e.g. \"2500000\"");

/**
 * A cap on one run: what its ledger rows amount to (`maxMicros`, the plan's overage prices) and/or the
 * tokens it uses (`maxTokens`). Checked between model turns, like the plan's ceilings: the run pauses
 * when it is reached (the overshoot is at most one turn) and resumes when the app raises it.
 */
export const RunBudget = z
  .object({
    maxMicros: MicrosString.optional().describe("What the run's ledger rows may amount to, integer micros as a string."),
    maxTokens: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional().describe("Tokens the run may use (input, cache and output alike)."),
  })
  .strict()
  .refine((b) => b.maxMicros !== undefined || b.maxTokens !== undefined, "name maxMicros, maxTokens or both");
export type RunBudget = z.infer<typeof RunBudget>;

/** A run's budget against what it used, as `run_paused` and `POST /v1/runs/:id/budget` say it. */
export const RunBudgetStanding = z.object({
  maxMicros: z.string().nullable(),
  maxTokens: z.number().int().nullable(),
  usedMicros: z.string().describe("What the run's ledger rows amount to so far, integer micros as a string."),
  usedTokens: z.number().int(),
  reached: z.boolean(),
  note: z
    .string()
    .nullable()
    .describe("Why the budget may never be reached as given (a `maxMicros` on a route or plan that charges nothing, an agent CLI checked only at its start); null when nothing is."),
});

/** Which limit paused a run. */
export const PauseLimit = z.enum(["spend_ceiling", "allowance", "run_budget"]);

/** What a follow-up run does when the agent CLI session it continues cannot be continued. */
export const OnSessionLost = z.enum(["refuse", "restart"]);
export type OnSessionLost = z.infer<typeof OnSessionLost>;

export const CreateRunRequest = z.object({
  user: UserId,
  model: z
    .string()
    .min(1)
    .optional()
    .describe("`auto` (the default) lets the service pick; otherwise a model or `<runtime>/<model>` alias. On a follow-up (`previousRunId`), omitted: the model the previous run asked for."),
  prompt: z.string().min(1),
  system: z.string().optional(),
  tools: z.array(Tool).max(128).optional(),
  route: z
    .object({
      prefer: z.array(RouteKind).min(1).describe("Route kinds to try, in order. Default: user-hardware, user-subscription, app."),
    })
    .optional(),
  limits: RunLimits.optional(),
  budget: RunBudget.optional().describe("A cap on this run; reached between turns, the run pauses (`run_paused`) until the app raises it."),
  metadata: z.record(z.string()).optional(),
  previousRunId: z
    .string()
    .min(1)
    .max(64)
    .optional()
    .describe(
      "Continue the conversation of this ended run (same app, environment and user; anything else is 404 as an unknown run; one still active is 409 `run_active`). On a model runtime the stored conversation goes first, to whichever runtime routing picks; on an agent CLI the same CLI session on the same machine is resumed. `tools` and `system` omitted: the previous run's are kept; given: they replace them. `limits`, `budget`, `route` and `metadata` are this run's own.",
    ),
  onSessionLost: OnSessionLost.optional().describe(
    "On a follow-up of an agent CLI run whose session cannot be continued (its machine offline, the session forgotten there, the CLI refusing it): `refuse` (the default) answers 409 `session_unavailable` at the start, or fails the run `session_lost`; `restart` starts a fresh session on any route with the stored transcript as context, and says so in a `session_restarted` event.",
  ),
});
export type CreateRunRequest = z.infer<typeof CreateRunRequest>;

/** `POST /v1/runs/:id/messages`: a user message added to a run while it works (steering). */
export const RunMessageRequest = z.object({
  content: z.string().min(1).max(100_000).describe("The message, as the user typed it."),
  user: UserId.optional().describe("The run's user; when given it must match, or the run is not found."),
});
export const MessageDelivery = z.enum(["now", "next_turn"]);
export type MessageDelivery = z.infer<typeof MessageDelivery>;
export const RunMessageResponse = z.object({
  runId: z.string(),
  messageId: z.string().describe("The message's id; its `user_message` event carries it."),
  delivery: MessageDelivery.describe(
    "`now`: an agent CLI working on the run gets it mid-turn, as typed into it; `next_turn`: it goes in before the agent's next model call (a model runtime's turn in flight ends first; a run queued or paused gets it when it goes on).",
  ),
});

/**
 * Optional on every answer: the run's user. When given and the run is another
 * user's, the answer gets 404, as for another app's run.
 */
const AnsweringUser = UserId.optional().describe("The run's user; when given it must match, or the run is not found.");

export const ToolResultRequest = z.object({
  callId: z.string().min(1).max(128),
  user: AnsweringUser,
  result: z.unknown().refine((v) => v !== undefined, "result is required"),
  isError: z.boolean().optional(),
});
export const ToolResultResponse = z.object({ runId: z.string(), callId: z.string(), accepted: z.literal(true) });

export const ApprovalRequest = z.object({
  approvalId: z.string().min(1).max(128),
  user: AnsweringUser,
  decision: z.string().min(1).describe("`allow` grants; any other value is a denial."),
  reason: z.string().max(4096).optional(),
});
export const ApprovalResponse = z.object({
  runId: z.string(),
  approvalId: z.string(),
  decision: z.enum(["allow", "deny"]).describe("How the decision was taken."),
});
/** How an approval was decided: `allow`, or `deny` (any other answer). */
export type ApprovalDecision = z.infer<typeof ApprovalResponse>["decision"];

export const RaiseBudgetRequest = z.object({
  user: AnsweringUser,
  maxMicros: MicrosString.optional().describe("The run's new cap on what its ledger rows amount to; omitted: unchanged."),
  maxTokens: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional().describe("The run's new cap on tokens; omitted: unchanged."),
}).refine((b) => b.maxMicros !== undefined || b.maxTokens !== undefined, "name maxMicros, maxTokens or both");
export const RaiseBudgetResponse = z.object({
  runId: z.string(),
  status: z.string().describe("The run's status: `paused` until its driver sees the new budget (at once, on any instance), then `running`."),
  budget: RunBudgetStanding,
});

export const CancelRequest = z.object({ reason: z.string().max(1024).optional(), user: AnsweringUser }).optional();
export const CancelResponse = z.object({
  runId: z.string(),
  status: z.string().describe("The run's status after the request: `stopping` while the worker stops, or its final status."),
});

/** What a run the app served itself used (after a `serve_in_app` handback). */
export const RunUsage = z.object({
  user: AnsweringUser,
  inputTokens: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  outputTokens: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  model: z.string().max(256).optional().describe("The model the app used."),
  costMicros: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional().describe("What serving it cost the app, integer micros."),
});
export const RunUsageResponse = z.object({
  runId: z.string(),
  costClass: CostClass,
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  amountMicros: z.number().int(),
});

/** What one turn (or a whole run) used: tokens, their cost class and amount (the OpenAPI `TokenUsage`). */
export const TokenUsage = z.object({
  inputTokens: z.number().int().describe("Input tokens, not counting those read from or written to a prompt cache."),
  outputTokens: z.number().int(),
  cacheReadTokens: z
    .number()
    .int()
    .optional()
    .describe("Input tokens read from the provider's prompt cache (an agent CLI reports them). A tokens plan counts input, cache reads, cache writes and output alike."),
  cacheWriteTokens: z.number().int().optional().describe("Input tokens written to the provider's prompt cache."),
  costClass: CostClass,
  amountMicros: z.number().int(),
});

export type TokenUsage = z.infer<typeof TokenUsage>;

/** What an approval is asked for: an app tool marked `needsApproval`, or an agent runtime's permission request. */
export const ApprovalKind = z.enum(["tool", "permission"]);
export type ApprovalKind = z.infer<typeof ApprovalKind>;

/** A tool call a model turn ended with, handed back whole to the caller who owns the loop (`run_completed.toolCalls`). */
export const HandedBackToolCall = z.object({ id: z.string(), name: z.string(), arguments: z.string() });
export type HandedBackToolCall = z.infer<typeof HandedBackToolCall>;

/**
 * The events of a run's `text/event-stream`. Each SSE frame carries `id:` (the
 * run's event sequence, for `Last-Event-ID`), `event:` (the kind) and `data:` (JSON).
 */
export const RunEvent = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("run_started"),
    runId: z.string(),
    route: RunRoute,
    costClass: CostClass,
    machineId: z.string().nullable(),
    runtime: z.string().nullable(),
    model: z.string(),
    billing: RuntimeBilling.optional()
      .describe("On an agent CLI, what pays for its model: the user's `subscription`, a provider `api_key` the user let it use, or the user's own `local_model` (then the route is `user-hardware`). Absent on a model runtime."),
    budget: z
      .object({ maxMicros: z.string().nullable(), maxTokens: z.number().int().nullable(), note: z.string().nullable() })
      .optional()
      .describe("The run's budget, when it has one; `note` says when it may never be reached as given (a route or plan that charges nothing)."),
    previousRunId: z.string().optional().describe("The run whose conversation this one continues (`previousRunId` of the request)."),
    session: z
      .enum(["resumed", "new"])
      .optional()
      .describe("On an agent CLI: `resumed`, the previous run's CLI session goes on; `new`, a session begins. Absent on a model runtime (its conversation lives in the service)."),
  }),
  z.object({ kind: z.literal("text_delta"), turn: z.number().int(), text: z.string() }),
  z.object({
    kind: z.literal("tool_call"),
    callId: z.string(),
    name: z.string(),
    arguments: z.unknown().describe("The arguments as the model wrote them, parsed from JSON (a string when they are not JSON)."),
    deadlineAt: z.string(),
  }),
  z.object({
    kind: z.literal("approval_request"),
    approvalId: z.string(),
    what: ApprovalKind.describe("An app tool marked `needsApproval`, or an agent runtime's permission request."),
    tool: z.string(),
    callId: z.string().optional().describe("For `tool`: the call that runs once allowed (its `tool_call` frame follows the grant)."),
    arguments: z.unknown(),
    description: z.string().optional(),
    deadlineAt: z.string(),
  }),
  z.object({ kind: z.literal("usage"), turn: z.number().int(), usage: TokenUsage }),
  z.object({
    kind: z.literal("activity"),
    summary: z.string().describe("What an agent runtime did on its own (a command run, a file changed)."),
    detail: z.unknown().optional(),
  }),
  z.object({
    kind: z.literal("run_queued"),
    machineId: z.string(),
    runtime: z.string(),
    place: z.number().int().min(1).describe("The run's place in its machine's queue for this runtime (1: next). Said again, with the same `deadlineAt`, each time the run moves up the queue."),
    reason: z.string().describe("Why it waits: the runtime is running as many jobs as its cap allows."),
    deadlineAt: z.string().describe("When it stops waiting: past it, the run fails `compute_busy`."),
  }),
  z.object({
    kind: z.literal("turn_restarted"),
    turn: z.number().int(),
    reason: z.string().describe("Why the turn is run again (its driving instance was lost); drop that turn's text so far."),
  }),
  z.object({
    kind: z.literal("run_completed"),
    output: z.string(),
    usage: TokenUsage,
    stopReason: z.string().describe("e.g. `end_turn`, `stop`."),
    toolCalls: z
      .array(HandedBackToolCall)
      .optional()
      .describe("A chat completion's tool calls, handed back to its caller (who owns the loop)."),
  }),
  z.object({
    kind: z.literal("run_failed"),
    error: z.object({ code: z.string(), message: z.string() }),
    // On the wire a string (a newer service may add reasons; older clients must not refuse the event); the names are `RunFailureReason`.
    stopReason: z
      .string()
      .describe(
        "Why it failed: `max_turns`, `tool_result_timeout`, `approval_timeout`, `spend_ceiling`, `worker_lost`, `runtime_error`, `internal_error`, " +
          "`limit_exceeded` (the machine passed a per-run limit: events, bytes, permission requests or tool calls; `error.message` names it), " +
          "`conversation_too_large` (a model turn's job would not fit the link's frame limit), `turn_timeout` (a model turn passed its deadline), " +
          "`run_timeout` (an agent CLI's run passed its deadline), `compute_busy` (queued for a slot on a full machine past the queue's deadline), `usage_limit_reached` (the agent CLI's subscription window is spent; `error.message` names when it resets), `pause_expired` (paused at a limit for longer than a pause is kept), `session_lost` (a follow-up's agent CLI session could not be continued and the request asked `onSessionLost: refuse`). Unknown values may be added.",
      ),
  }),
  z.object({
    kind: z.literal("run_paused"),
    limit: PauseLimit.describe("`spend_ceiling`: the plan's spend ceiling; `allowance`: a tokens plan that stops at its allowance; `run_budget`: the run's own budget."),
    message: z.string().describe("What was reached, with the amounts, and how to resume."),
    allowance: Standing.describe("Where the user stands against their plan, as `GET /v1/users/:id` says it."),
    budget: RunBudgetStanding.nullable().describe("The run's budget against what it used; null when it has none."),
    pausedAt: IsoTime,
    expiresAt: IsoTime.describe("Still paused then, the run fails `pause_expired`."),
    resume: z.string().describe("What resumes it: an upgrade (checkout or `PUT /v1/users/:id/plan`), the next window at `allowance.resetsAt`, or `POST /v1/runs/:id/budget`."),
  }),
  z.object({
    kind: z.literal("run_resumed"),
    limit: PauseLimit.describe("The limit that had paused it."),
    reason: z.enum(["plan_changed", "new_period", "budget_raised"]).describe("Why that limit no longer holds."),
    pausedMs: z.number().int().describe("How long it was paused."),
  }),
  z.object({ kind: z.literal("run_cancelled"), reason: z.string().optional(), output: z.string().describe("What was produced before the cancel.") }),
  z.object({
    kind: z.literal("user_message"),
    messageId: z.string(),
    content: z.string(),
    delivery: MessageDelivery.describe("`now`: handed to the agent CLI mid-turn; `next_turn`: added to the conversation before the next model call."),
  }),
  z.object({
    kind: z.literal("session_restarted"),
    previousRunId: z.string(),
    reason: z.string().describe("Why the agent CLI session of the previous run could not be continued; the run goes on in a fresh session with the stored transcript as context (`onSessionLost: restart`)."),
  }),
]);
export type RunEvent = z.infer<typeof RunEvent>;
/** One kind of run event, by its `kind`. */
export type RunEventOf<K extends RunEvent["kind"]> = Extract<RunEvent, { kind: K }>;
export const RUN_EVENT_KINDS = RunEvent.options.map((o) => o.shape.kind.value);

/** The kinds after which a run's stream ends. */
export const FINAL_RUN_EVENT_KINDS = ["run_completed", "run_failed", "run_cancelled"] as const;
const FINAL_KINDS = new Set<string>(FINAL_RUN_EVENT_KINDS);
/** Does an event of this kind end its run (and its stream)? */
export const isFinalRunEvent = (kind: string): boolean => FINAL_KINDS.has(kind);

export const RunStatus = z.enum(["queued", "running", "waiting", "paused", "completed", "failed", "cancelled", "handed_back"]);
export type RunStatus = z.infer<typeof RunStatus>;

/** Which endpoint started a run: `runs` (the agent loop), or `chat` / `responses` (one model turn, the caller owns the loop). */
export const RunSource = z.enum(["runs", "chat", "responses"]);
export type RunSource = z.infer<typeof RunSource>;

/** A run as stored (extension `GET /v1/runs/:id`): the authoritative view of where it stands. */
export const Run = z.object({
  id: z.string(),
  user: z.string(),
  source: RunSource.describe("What started it: `POST /v1/runs`, `POST /v1/chat/completions` or `POST /v1/responses` (the response `resp_X` of run `run_X`)."),
  status: RunStatus,
  model: z.string(),
  route: RunRoute.nullable(),
  costClass: CostClass.nullable(),
  machineId: z.string().nullable(),
  runtime: z.string().nullable(),
  turns: z.number().int(),
  output: z.string().nullable(),
  stopReason: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  usage: z.object({ inputTokens: z.number().int(), outputTokens: z.number().int() }),
  budget: z
    .object({ maxMicros: z.string().nullable(), maxTokens: z.number().int().nullable() })
    .nullable()
    .describe("The run's budget (as last raised); null: none."),
  pausedAt: IsoTime.nullable().describe("While `paused`: since when (its `run_paused` event says why and until when)."),
  previousRunId: z.string().nullable().describe("The run whose conversation this one continues; null: it starts one."),
  lastEventId: z.number().int().describe("The sequence of its last stored event."),
  createdAt: z.string(),
  finishedAt: z.string().nullable(),
});
export type Run = z.infer<typeof Run>;
