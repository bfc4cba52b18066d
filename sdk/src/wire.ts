/**
 * The shapes the service sends and takes, written out as plain types: these are
 * what the published declarations carry (no zod, no ts-rest), so an app that
 * imports the SDK type-checks in well under a second. `wire.check.ts` proves
 * each one equal to the contract's schema, so they cannot drift from it.
 */

// ---------------------------------------------------------------- errors

/** Every error code the service answers, each always with the same status (see docs/app/errors.md). */
export type ErrorCode =
  | "invalid_request"
  | "invalid_json"
  | "authorization_pending"
  | "slow_down"
  | "access_denied"
  | "expired_token"
  | "invalid_grant"
  | "invalid_signature"
  | "invalid_state"
  | "connect_denied"
  | "connect_failed"
  | "missing_credential"
  | "invalid_credential"
  | "revoked_credential"
  | "wrong_credential_kind"
  | "session_expired"
  | "allowance_exhausted"
  | "spend_ceiling_reached"
  | "forbidden"
  | "not_found"
  | "route_not_found"
  | "method_not_allowed"
  | "serve_in_app"
  | "no_compute"
  | "already_answered"
  | "run_finished"
  | "run_active"
  | "session_unavailable"
  | "conversation_unavailable"
  | "response_in_progress"
  | "not_configured"
  | "idempotency_key_reused"
  | "idempotency_key_in_use"
  | "usage_already_reported"
  | "plan_exists"
  | "plan_unavailable"
  | "account_in_use"
  | "billing_not_connected"
  | "already_subscribed"
  | "no_subscription"
  | "endpoint_disabled"
  | "last_owner"
  | "portal_unavailable"
  | "request_timeout"
  | "expired"
  | "connect_required"
  | "expectation_failed"
  | "payload_too_large"
  | "unsupported_media_type"
  | "headers_too_large"
  | "rate_limited"
  | "compute_busy"
  | "internal_error"
  | "not_implemented"
  | "service_unavailable"
  | "database_unavailable"
  | "bus_unavailable";

/** The error envelope every endpoint answers errors in. */
export interface ErrorEnvelope {
  error: {
    /** Broad class of the error, e.g. `authentication_error`. */
    type: string;
    code: ErrorCode;
    message: string;
    /** Also in the `Request-Id` header; quote it to support. */
    requestId: string;
    /** The request field at fault, when there is one. */
    param?: string;
    /** On `slow_down`: the new poll interval in seconds. */
    interval?: number;
  };
}

// ---------------------------------------------------------------- common

export type Environment = "test" | "live";
/** Who paid for the compute: the user's hardware, the user's own subscription, the app (served in app), or nobody. */
export type CostClass = "user_hardware" | "user_subscription" | "app_served" | "free";
/** Where a run's compute comes from. */
export type RouteKind = "user-hardware" | "user-subscription" | "app";
/** Where a run went: a route kind, or `service` (the service answered it itself: `svc/echo`). */
export type RunRoute = RouteKind | "service";
export type LiveState = "online" | "offline" | "busy";
/** `model`: a model server the service drives turn by turn; `agent`: a coding-agent CLI that runs its own loop. */
export type RuntimeKind = "model" | "agent";
/** For an agent CLI, what pays for its model: the user's `subscription`, a provider `api_key` the user let it use, or the user's own `local_model`. */
export type RuntimeBilling = "subscription" | "api_key" | "local_model";

/** Why a runtime found on a machine cannot run there. */
export type RuntimeUnavailableReason = "sandbox_missing" | "sandbox_refused" | "cli_not_launchable";
export interface RuntimeUnavailable {
  reason: RuntimeUnavailableReason;
  /** What is wrong and what the machine's user can do; never a path, user name or environment value of the machine. */
  message: string;
}

/** One runtime on a user's machine. */
export interface Runtime {
  /** e.g. `ollama`, `llamacpp`, `lmstudio`, `openai-compatible:<name>`, `claude-code`, `codex`, `claude-code-local`, `codex-local`. */
  name: string;
  kind: RuntimeKind;
  costClass: CostClass;
  models: string[];
  version: string | null;
  /** For an agent CLI, what pays for its model; null for a model runtime. */
  billing: RuntimeBilling | null;
  /** False: found in a version its worker does not support; never routed to. */
  supported: boolean;
  note: string | null;
  /**
   * Found and turned on, but it cannot run on the machine, and why: `sandbox_missing` (agent CLIs run only in a sandbox and
   * the machine has none), `sandbox_refused` (the host forbids the sandbox's namespaces), `cli_not_launchable` (the CLI does
   * not start). Never routed to; `message` says what the machine's user can do. Null: it runs.
   */
  unavailable: RuntimeUnavailable | null;
  state: LiveState;
  /** An agent CLI on a subscription: its usage windows as the CLI last reported them (absent until it has). A runtime with a `rejected` window is not routed to until its `resetsAt`. */
  limits?: RuntimeLimits;
}

/** One usage window of an agent CLI's subscription, as the CLI reports it. */
export interface UsageWindow {
  /** `5h`, `7d`, `7d_opus`, `7d_sonnet`, `overage`, or `<minutes>m`. */
  window: string;
  /** `rejected`: spent until `resetsAt`. */
  status: "allowed" | "warning" | "rejected";
  usedPercent?: number;
  resetsAt?: string;
}

/** An agent CLI's subscription windows as its machine last reported them. */
export interface RuntimeLimits {
  windows: UsageWindow[];
  updatedAt: string;
}

/** A paired machine of a user. */
export interface Machine {
  id: string;
  hostname: string;
  platform: string;
  arch: string;
  client: string;
  state: LiveState;
  /** ISO 8601. */
  pairedAt: string;
  lastSeenAt: string | null;
  runtimes: Runtime[];
}

/** One page of a paginated list. */
export interface PageBody<T> {
  data: T[];
  hasMore: boolean;
  /** Pass as `cursor` to read the next page. */
  nextCursor: string | null;
}

// ---------------------------------------------------------------- users, plans, usage

export type PlanPeriod = "month" | "year";
export type AllowanceUnit = "runs" | "tokens";

export interface Plan {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  /** Integer micros (1 USD = 1,000,000). */
  priceMicros: number;
  currency: string;
  period: PlanPeriod;
  /** `limit: null` is unlimited. */
  allowance: { unit: AllowanceUnit; limit: number | null };
  /** True: usage goes on past the allowance as overage; false: the plan stops at its allowance (402). */
  overage: boolean;
  overagePriceMicros: number | null;
  spendCeilingMicros: number | null;
  /** Percentages of the allowance (of the spend ceiling when the allowance is unlimited) at which `allowance.threshold` is sent. */
  alertThresholds: number[];
  trialDays: number;
  stripePriceId: string | null;
  /** Users without a subscription are on the default plan. */
  isDefault: boolean;
  archived: boolean;
}

export interface PlanList {
  data: Plan[];
}

/**
 * Where a user stands against their plan in its current window: `users.retrieve(...).allowance`, and
 * `PaymentRequiredError.allowance` on a 402, so an app can say "8 of 10 runs, resets on 1 December".
 */
export interface Standing {
  unit: AllowanceUnit;
  /** The plan's allowance in `unit`; null: unlimited. */
  limit: number | null;
  /** Runs counted, or tokens used, this window. */
  used: number;
  remaining: number | null;
  reached: boolean;
  /** The window's name: `2026-11` for a monthly plan, `2026` for a yearly one (UTC). */
  period: string;
  windowStart: string;
  /** When the next window begins and the allowance is whole again. */
  resetsAt: string;
  /** Spend against the plan's ceiling, in integer micros of the plan's currency. */
  spend: { usedMicros: number; ceilingMicros: number | null; remainingMicros: number | null; reached: boolean };
}

/** A user's plan, allowance, usage this period and what is connected. */
export interface User {
  id: string;
  email: string | null;
  environment: Environment;
  plan: Plan | null;
  subscription: {
    /** `active`, `trialing`, `past_due`, `canceled` ... */
    status: string;
    /** `stripe`: bought through checkout; `app`: set by the app (`users.setPlan`). */
    source: "stripe" | "app";
    trialEndsAt: string | null;
    currentPeriodEnd: string | null;
  } | null;
  allowance: Standing;
  usage: {
    period: string;
    runs: number;
    inputTokens: number;
    outputTokens: number;
    cacheReadTokens: number;
    cacheWriteTokens: number;
    amountMicros: number;
  };
  connected: { machines: number; online: number; runtimes: string[] };
  createdAt: string;
}

/** A user's machines, runtimes, cost classes and live state. */
export interface Compute {
  user: string;
  machines: Machine[];
}

/** Filters of `usage.list` (paging is done for you). */
export interface UsageListParams {
  user?: string;
  /** Only this run's rows. */
  run?: string;
  costClass?: CostClass;
  /** `YYYY-MM`. */
  period?: string;
  /** Must be the app key's own environment when given. */
  environment?: Environment;
  /** Rows per page (1-500, default 100). */
  limit?: number;
  /** Start after this cursor (a previous page's `nextCursor`). */
  cursor?: string;
}

/** One row of the ledger. */
export interface UsageRow {
  id: string;
  user: string;
  environment: Environment;
  runId: string | null;
  costClass: CostClass;
  /** `run` (counted at its start), `tokens` (a turn on the user's compute), `app_usage` (reported by the app), `echo`. */
  kind: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  amountMicros: number;
  period: string;
  createdAt: string;
}

/** What `plans.create` takes; omitted fields take the defaults shown. */
export interface PlanCreateParams {
  /** Lowercase letters, digits, `-` and `_`. */
  slug: string;
  name: string;
  description?: string | null;
  /** Default 0. */
  priceMicros?: number;
  /** ISO 4217, lowercase; default `usd`. */
  currency?: string;
  /** Default `month`. */
  period?: PlanPeriod;
  /** Default `{ unit: "runs", limit: null }` (unlimited). */
  allowance?: { unit: AllowanceUnit; limit: number | null };
  /** Default false: the run that would pass the allowance gets 402. */
  overage?: boolean;
  overagePriceMicros?: number | null;
  spendCeilingMicros?: number | null;
  /** Default [80, 100]: percentages at which `allowance.threshold` is sent, once per user and window. */
  alertThresholds?: number[];
  /** Default 0. */
  trialDays?: number;
  stripePriceId?: string | null;
  /** Default false. */
  isDefault?: boolean;
}

/** What `plans.update` takes: only the fields sent change. */
export type PlanUpdateParams = Partial<Omit<PlanCreateParams, "slug">>;

// ---------------------------------------------------------------- sessions, machines

export interface SessionCreateParams {
  /** The app's id for its end user. */
  user: string;
  email?: string;
}

export interface Session {
  /** `est_...` token acting for exactly this user. */
  session: string;
  /** Seconds (600: ten minutes). */
  expires_in: number;
  /** The hosted connect page for this user (the token rides in the URL fragment). */
  url: string;
  /** The hosted billing page for this user. */
  billing_url: string;
}

export interface SessionsEnded {
  user: string;
  /** How many live sessions were ended. */
  ended: number;
}

export interface MachineRemoved {
  id: string;
  /** From this moment the machine's pairing token is refused and its connection is closed. */
  revokedAt: string;
}

// ---------------------------------------------------------------- runs

export interface RunUsageTotals {
  /** Input tokens, not counting those read from or written to a prompt cache. */
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
  costClass: CostClass;
  amountMicros: number;
}

/** The events of a run's stream, by `kind`. */
export type RunEvent =
  | {
      kind: "run_started";
      runId: string;
      route: RunRoute;
      costClass: CostClass;
      machineId: string | null;
      runtime: string | null;
      model: string;
      /** On an agent CLI, what pays for its model. */
      billing?: RuntimeBilling;
      /** The run's budget; `note` says when it may never be reached as given. */
      budget?: { maxMicros: string | null; maxTokens: number | null; note: string | null };
      /** The run whose conversation this one continues (the request's `previousRunId`). */
      previousRunId?: string;
      /** On an agent CLI: `resumed`, the previous run's CLI session goes on; `new`, a session begins. Absent on a model runtime. */
      session?: "resumed" | "new";
    }
  | { kind: "text_delta"; turn: number; text: string }
  | {
      kind: "tool_call";
      callId: string;
      name: string;
      /** The arguments as the model wrote them, parsed from JSON (a string when they are not JSON). */
      arguments?: unknown;
      deadlineAt: string;
    }
  | {
      kind: "approval_request";
      approvalId: string;
      /** An app tool marked `needsApproval`, or an agent runtime's permission request. */
      what: "tool" | "permission";
      tool: string;
      callId?: string;
      arguments?: unknown;
      description?: string;
      deadlineAt: string;
    }
  | { kind: "usage"; turn: number; usage: RunUsageTotals }
  | {
      kind: "activity";
      /** What an agent runtime did on its own (a command run, a file changed). */
      summary: string;
      detail?: unknown;
    }
  | {
      kind: "run_queued";
      machineId: string;
      runtime: string;
      /** The run's place in its machine's queue for this runtime (1: next). */
      place: number;
      /** Why it waits: the runtime is running as many jobs as its cap allows. */
      reason: string;
      /** When it stops waiting: past it, the run fails `compute_busy`. */
      deadlineAt: string;
    }
  | {
      kind: "turn_restarted";
      turn: number;
      /** Why the turn is run again; drop that turn's text so far. */
      reason: string;
    }
  | {
      kind: "run_completed";
      output: string;
      usage: RunUsageTotals;
      stopReason: string;
      toolCalls?: { id: string; name: string; arguments: string }[];
    }
  | {
      kind: "run_failed";
      error: { code: string; message: string };
      /** `max_turns`, `tool_result_timeout`, `approval_timeout`, `spend_ceiling`, `worker_lost`, `runtime_error`, ...; unknown values may be added. */
      stopReason: string;
    }
  | {
      kind: "run_paused";
      /** Which limit: the plan's spend ceiling, a tokens plan's allowance, or the run's own budget. */
      limit: PauseLimit;
      message: string;
      /** Where the user stands against their plan. */
      allowance: Standing;
      budget: RunBudgetStanding | null;
      pausedAt: string;
      /** Still paused then, the run fails `pause_expired`. */
      expiresAt: string;
      /** What resumes it. */
      resume: string;
    }
  | { kind: "run_resumed"; limit: PauseLimit; reason: "plan_changed" | "new_period" | "budget_raised"; pausedMs: number }
  | { kind: "run_cancelled"; reason?: string; output: string }
  | {
      kind: "user_message";
      /** The id `POST /v1/runs/:id/messages` answered. */
      messageId: string;
      content: string;
      /** `now`: handed to the agent CLI mid-turn; `next_turn`: added to the conversation before the next model call. */
      delivery: MessageDelivery;
    }
  | {
      kind: "session_restarted";
      previousRunId: string;
      /** Why the previous run's agent CLI session could not be continued; the run goes on in a fresh session with the stored transcript as context. */
      reason: string;
    };

/** How a steering message reaches the run: `now` (an agent CLI, mid-turn) or `next_turn` (before the next model call). */
export type MessageDelivery = "now" | "next_turn";

/** What a follow-up does when the agent CLI session it continues cannot be continued: `refuse` (the default) or `restart`. */
export type OnSessionLost = "refuse" | "restart";

/** An app tool as the service is told of it (the SDK's `RunTool` without its `run`). */
export interface ToolDefinition {
  name: string;
  description?: string;
  /** JSON Schema of the tool's arguments. */
  parameters?: Record<string, unknown>;
  needsApproval?: boolean;
}

/** The body of `POST /v1/runs`, as the SDK sends it. */
export interface RunCreateBody {
  user: string;
  /** `auto` (the default) or a model; on a follow-up, omitted: the previous run's model. */
  model?: string;
  prompt: string;
  system?: string;
  tools?: ToolDefinition[];
  route?: { prefer: RouteKind[] };
  limits?: RunLimits;
  budget?: RunBudget;
  metadata?: Record<string, string>;
  /** Continue the conversation of this ended run. */
  previousRunId?: string;
  onSessionLost?: OnSessionLost;
}

/** `POST /v1/runs/:id/messages`: a user message added to a working run (steering). */
export interface RunMessageParams {
  /** The message, as the user typed it. */
  content: string;
  /** The run's user; when given it must match, or the run is not found. */
  user?: string;
}

/** The answer to `POST /v1/runs/:id/messages` (`202`). */
export interface RunMessageResponse {
  runId: string;
  /** The message's id; its `user_message` event carries it. */
  messageId: string;
  /** `now`: an agent CLI working on the run gets it mid-turn; `next_turn`: it goes in before the agent's next model call. */
  delivery: MessageDelivery;
}

export type PauseLimit = "spend_ceiling" | "allowance" | "run_budget";

/** A run's budget against what it used. */
export interface RunBudgetStanding {
  maxMicros: string | null;
  maxTokens: number | null;
  /** Integer micros as a string. */
  usedMicros: string;
  usedTokens: number;
  reached: boolean;
  note: string | null;
}

/** A cap on one run: integer micros written as a string, and/or tokens. */
export interface RunBudget {
  maxMicros?: string;
  maxTokens?: number;
}

export interface RaiseBudgetResponse {
  runId: string;
  status: string;
  budget: RunBudgetStanding;
}

export type RunStatus = "queued" | "running" | "waiting" | "paused" | "completed" | "failed" | "cancelled" | "handed_back";

/** A run as stored: where it stands. */
export interface Run {
  id: string;
  user: string;
  /** What started it: `POST /v1/runs`, `POST /v1/chat/completions` or `POST /v1/responses` (the response `resp_X` of run `run_X`). */
  source: "runs" | "chat" | "responses";
  status: RunStatus;
  model: string;
  route: RunRoute | null;
  costClass: CostClass | null;
  machineId: string | null;
  runtime: string | null;
  turns: number;
  output: string | null;
  stopReason: string | null;
  error: { code: string; message: string } | null;
  usage: { inputTokens: number; outputTokens: number };
  /** The run's budget (as last raised); null: none. */
  budget: { maxMicros: string | null; maxTokens: number | null } | null;
  /** While `paused`: since when. */
  pausedAt: string | null;
  /** The run whose conversation this one continues; null: it starts one. */
  previousRunId: string | null;
  /** The sequence of its last stored event. */
  lastEventId: number;
  createdAt: string;
  finishedAt: string | null;
}

export interface RunLimits {
  /** Model turns at most (default 20). */
  maxTurns?: number;
  toolResultTimeoutMs?: number;
  approvalTimeoutMs?: number;
  turnTimeoutMs?: number;
  runTimeoutMs?: number;
}

export interface CancelRunResponse {
  runId: string;
  /** `stopping` while the worker stops, or its final status. */
  status: string;
}

export interface RunUsageReport {
  /** The run's user; when given it must match. */
  user?: string;
  inputTokens: number;
  outputTokens: number;
  model?: string;
  costMicros?: number;
}

export interface RunUsageResponse {
  runId: string;
  costClass: CostClass;
  inputTokens: number;
  outputTokens: number;
  amountMicros: number;
}

// ---------------------------------------------------------------- chat completions, models

export type ChatContent = string | ({ type: string } & Record<string, unknown>)[];

export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: "system" | "developer" | "user"; content: ChatContent; name?: string; [extra: string]: unknown }
  | { role: "assistant"; content?: ChatContent | null; name?: string; tool_calls?: ChatToolCall[]; [extra: string]: unknown }
  | { role: "tool"; content: ChatContent; tool_call_id: string; [extra: string]: unknown };

/** The standard chat-completions request, plus `user` (required). */
export interface ChatCompletionCreateParams {
  /** `auto`, `svc/echo`, or a `<runtime>/<model>` alias. */
  model: string;
  messages: ChatMessage[];
  /** The end user the completion is for. */
  user: string;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean } | null;
  tools?: { type: "function"; function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null } }[];
  tool_choice?: unknown;
  parallel_tool_calls?: boolean;
  temperature?: number | null;
  top_p?: number | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  stop?: string | string[] | null;
  n?: number | null;
  seed?: number | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  response_format?: unknown;
  [extra: string]: unknown;
}

export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter";
export interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: { index: number; message: { role: "assistant"; content: string | null; tool_calls?: ChatToolCall[] }; finish_reason: FinishReason | null }[];
  usage?: ChatUsage;
}

/** One frame of a streamed completion. */
export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: {
    index: number;
    delta: {
      role?: "assistant";
      content?: string | null;
      tool_calls?: { index: number; id?: string; type?: "function"; function?: { name?: string; arguments?: string } }[];
    };
    finish_reason: FinishReason | null;
  }[];
  usage?: ChatUsage | null;
}

export interface ModelList {
  object: "list";
  data: { id: string; object: "model"; created: number; owned_by: string }[];
}

// ---------------------------------------------------------------- billing account

export interface BillingAccount {
  environment: Environment;
  /** `acct_...`; null until one is connected. */
  stripeAccountId: string | null;
  connectedVia: "oauth" | "created" | "legacy" | null;
  connectedAt: string | null;
  chargesEnabled: boolean | null;
  detailsSubmitted: boolean | null;
  payoutsEnabled: boolean | null;
  requirements: { currentlyDue: string[]; pastDue: string[]; disabledReason: string | null } | null;
  checkedAt: string | null;
  /** Where Stripe must send this account's events. */
  webhookUrl: string;
}

export interface BillingConnectParams {
  /** `oauth`: connect an existing Stripe account; `create`: the platform creates one for the app. */
  mode: "oauth" | "create";
  /** Where the browser goes when the flow ends. */
  returnUrl?: string;
}

export interface BillingConnectStart {
  mode: "oauth" | "create";
  /** Send the app owner's browser here. */
  url: string;
  expiresAt: string;
  stripeAccountId: string | null;
}

// ---------------------------------------------------------------- webhooks

export type WebhookEventType = "run.finished" | "machine.paired" | "machine.online" | "machine.offline" | "plan.changed" | "allowance.reached" | "allowance.threshold" | "run.paused" | "run.resumed" | "runtime.window_spent" | "runtime.window_reset" | "test.ping";

export interface WebhookEndpointCreateParams {
  /** http or https. */
  url: string;
  /** Default: every event type. */
  events?: WebhookEventType[];
}

export interface WebhookEndpoint {
  id: string;
  url: string;
  events: WebhookEventType[];
  createdAt: string;
  disabled: boolean;
  /** Why every delivery would be refused, with the setting that allows it (a loopback or private address the service does not let this environment reach); null when nothing is known against it. */
  warning: string | null;
}

export interface CreatedWebhookEndpoint extends WebhookEndpoint {
  /** `whsec_...`: shown once; verify signatures with it. */
  secret: string;
}

export interface WebhookDeliveryListParams {
  endpoint?: string;
  status?: "pending" | "delivered" | "failed";
  type?: WebhookEventType;
  /** Deliveries per page (1-200, default 50). */
  limit?: number;
  cursor?: string;
}

export interface WebhookDelivery {
  /** The `webhook-id` the receiver saw (the same on every retry). */
  id: string;
  endpointId: string;
  type: WebhookEventType;
  /** The JSON body sent: `{type, timestamp, data}`. */
  /** The JSON body sent. */
  payload: WebhookPayload;
  status: "pending" | "delivered" | "failed";
  attempts: { attempt: number; at: string; statusCode: number | null; error: string | null; durationMs: number }[];
  nextAttemptAt: string | null;
  lastError: string | null;
  deliveredAt: string | null;
  createdAt: string;
}
export * from "./responses-wire.js";

/** What every webhook's body is: its type, when it was recorded, and its data. */
export interface WebhookPayload {
  type: WebhookEventType;
  timestamp: string;
  data: AllowanceThresholdData | RunPausedData | RunResumedData | Record<string, unknown>;
}

/** `data` of `allowance.threshold`. */
export interface AllowanceThresholdData {
  user: string;
  measure: "allowance" | "spend";
  threshold: number;
  period: string;
  allowance: Standing;
}

/** `data` of `run.paused`. */
export interface RunPausedData {
  runId: string;
  user: string;
  limit: PauseLimit;
  allowance: Standing;
  budget: RunBudgetStanding | null;
  pausedAt: string;
  expiresAt: string;
}

/** `data` of `run.resumed`. */
export interface RunResumedData {
  runId: string;
  user: string;
  limit: PauseLimit;
  reason: "plan_changed" | "new_period" | "budget_raised";
  pausedMs: number;
}
