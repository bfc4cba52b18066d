import type { z } from "zod";
import {
  ApprovalRequest,
  ApprovalResponse,
  AssignPlanRequest,
  BillingAccount,
  BillingAccountRequest,
  BillingOverview,
  CancelRequest,
  CancelResponse,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  ChatTool,
  CheckoutRequest,
  CheckoutSession,
  Compute,
  ConnectCallbackResult,
  ConnectInfo,
  ConnectRequest,
  ConnectStart,
  CostClass,
  CreatedWebhookEndpoint,
  CreateRunRequest,
  CreateSessionRequest,
  CreateWebhookEndpoint,
  DeviceAnswerResponse,
  DeviceCodeRequest,
  DeviceCodeResponse,
  DeviceLookupResponse,
  DeviceTokenRequest,
  DeviceTokenResponse,
  EndSessionsResponse,
  Environment,
  ErrorBody,
  ErrorEnvelope,
  LiveState,
  Machine,
  MachineList,
  MachineRemoved,
  ModelList,
  Plan,
  PlanInput,
  PlanList,
  PlanUpdate,
  PortalRequest,
  PortalSession,
  RouteKind,
  RunRoute,
  Run,
  RunEvent,
  RunLimits,
  RunStatus,
  RunUsage,
  RunUsageResponse,
  Runtime,
  RuntimeKind,
  SessionResponse,
  StripeWebhookAck,
  StripeWebhookBody,
  Tool,
  ToolResultRequest,
  ToolResultResponse,
  UsagePage,
  UsageRow,
  User,
  UserCodeBody,
  WebhookAttempt,
  WebhookDelivery,
  WebhookDeliveryPage,
  WebhookEndpoint,
  WebhookEndpointList,
  WebhookEventType,
} from "@svc/contract";

/**
 * A schema of the contract published under a name in `components/schemas`.
 * Operations whose body or response is this very zod object point at it by `$ref`; so does
 * every schema in the document that is the same JSON Schema (the contract nests them).
 */
export interface NamedSchema {
  name: string;
  schema: z.ZodTypeAny;
  /** A request body: its JSON Schema is the zod input (defaults make fields optional). Default: the output. */
  input?: boolean;
  /** Only where an operation names this very zod object; never matched by shape (too generic a shape). */
  identityOnly?: boolean;
  description?: string;
}

const pascal = (s: string) => s.replace(/(^|_)([a-z])/g, (_m, _u, c: string) => c.toUpperCase());

/** `run_started` → `RunStartedEvent`: each run event kind under its own name. */
export const runEventSchemaName = (kind: string) => `${pascal(kind)}Event`;

const RUN_EVENT_DESCRIPTIONS: Record<RunEvent["kind"], string> = {
  run_started: "First event of every run: where it goes (route, machine, runtime, model) and how it is billed.",
  text_delta: "A piece of the model's text for `turn`.",
  tool_call: "The model calls one of the app's tools: answer with `POST /v1/runs/{id}/tool_result` before `deadlineAt`.",
  approval_request: "The run waits for the app's decision: answer with `POST /v1/runs/{id}/approval` before `deadlineAt`.",
  usage: "What one turn used, and its cost class and amount.",
  activity: "Something an agent runtime did on its own (a command run, a file changed).",
  turn_restarted: "The turn is run again from its start (its driving instance was lost): drop the turn's text so far.",
  run_completed: "Final: the run ended normally, with its whole output and usage.",
  run_failed: "Final: the run failed; `stopReason` says why.",
  run_cancelled: "Final: the run was cancelled; `output` is what was produced before.",
};

const runEventKinds = RunEvent.options.map((o) => ({
  name: runEventSchemaName(o.shape.kind.value),
  schema: o as z.ZodTypeAny,
  description: RUN_EVENT_DESCRIPTIONS[o.shape.kind.value as RunEvent["kind"]],
}));

const usageEvent = RunEvent.options.find((o) => o.shape.kind.value === "usage") as unknown as z.AnyZodObject;
const chatRole = (role: string) => ChatMessage.options.find((o) => o.shape.role.value === role)!;
const chatUsage = (ChatCompletion.shape.usage as z.ZodOptional<z.ZodTypeAny>).unwrap();

export const NAMED_SCHEMAS: NamedSchema[] = [
  // errors
  { name: "Error", schema: ErrorEnvelope },
  { name: "ErrorBody", schema: ErrorBody },
  // shared enums
  { name: "Environment", schema: Environment },
  { name: "CostClass", schema: CostClass },
  { name: "RouteKind", schema: RouteKind, description: "Where a run may go: the user's own hardware (a model runtime), the user's own subscription (an agent CLI), or back to the app." },
  { name: "RunRoute", schema: RunRoute, description: "Where a run went: a route kind, or `service` (the service answered it itself, `svc/echo`: no machine, cost class `free`)." },
  { name: "RuntimeKind", schema: RuntimeKind },
  { name: "LiveState", schema: LiveState, description: "A machine's or runtime's live state." },
  { name: "RunStatus", schema: RunStatus, description: "Where a run stands." },
  { name: "WebhookEventType", schema: WebhookEventType, description: "The kinds of webhook the service sends." },
  // runs
  { name: "CreateRunRequest", schema: CreateRunRequest, input: true, description: "Start a run for `user`." },
  { name: "Tool", schema: Tool, input: true, description: "An app tool the run may call. The model sees `name`, `description` and `parameters`." },
  { name: "RunLimits", schema: RunLimits, input: true, description: "Deadlines and bounds of one run." },
  { name: "Run", schema: Run, description: "A run as stored: the authoritative view of where it stands." },
  { name: "RunEvent", schema: RunEvent, description: "One event of a run's `text/event-stream` (the JSON of its `data:`); `kind` is also the frame's `event:`." },
  ...runEventKinds,
  { name: "TokenUsage", schema: usageEvent.shape.usage, description: "Tokens used, their cost class and amount in integer micros." },
  { name: "ToolResultRequest", schema: ToolResultRequest, input: true, description: "The app's answer to a `tool_call`." },
  { name: "ToolResultResponse", schema: ToolResultResponse },
  { name: "ApprovalRequest", schema: ApprovalRequest, input: true, description: "The app's answer to an `approval_request`." },
  { name: "ApprovalResponse", schema: ApprovalResponse },
  { name: "CancelRequest", schema: CancelRequest, input: true, description: "Optional: why, and the run's user." },
  { name: "CancelResponse", schema: CancelResponse },
  { name: "RunUsageReport", schema: RunUsage, input: true, description: "What a run the app served itself (after `serve_in_app`) used." },
  { name: "RunUsageResponse", schema: RunUsageResponse, description: "The ledger row recorded for the reported usage." },
  // chat
  { name: "ChatCompletionRequest", schema: ChatCompletionRequest, input: true, description: "The standard chat-completions request, plus `user` (required here). Unknown fields are accepted and ignored." },
  { name: "ChatMessage", schema: ChatMessage, input: true, description: "One message of the conversation, by `role`." },
  { name: "ChatSystemMessage", schema: chatRole("system"), input: true },
  { name: "ChatDeveloperMessage", schema: chatRole("developer"), input: true },
  { name: "ChatUserMessage", schema: chatRole("user"), input: true },
  { name: "ChatAssistantMessage", schema: chatRole("assistant"), input: true },
  { name: "ChatToolMessage", schema: chatRole("tool"), input: true },
  { name: "ChatTool", schema: ChatTool, input: true, description: "A function the model may call; the caller owns the loop." },
  { name: "ChatCompletion", schema: ChatCompletion, description: "A chat completion (`stream` absent or false)." },
  { name: "ChatCompletionChunk", schema: ChatCompletionChunk, description: "One `data:` frame of a streamed completion (`stream: true`); the stream ends with `data: [DONE]`." },
  { name: "ChatUsage", schema: chatUsage, description: "Tokens of a chat completion." },
  { name: "ModelList", schema: ModelList, description: "What can be asked for: `svc/echo`, `auto`, and the models the user's machines serve now." },
  // machines and pairing
  { name: "Runtime", schema: Runtime, description: "A model server or agent CLI on a user's machine." },
  { name: "Machine", schema: Machine, description: "A paired machine of a user and its runtimes." },
  { name: "MachineList", schema: MachineList },
  { name: "MachineRemoved", schema: MachineRemoved },
  { name: "Compute", schema: Compute, description: "A user's machines, runtimes, cost classes and live state." },
  { name: "DeviceCodeRequest", schema: DeviceCodeRequest, input: true, description: "The machine asking to be paired." },
  { name: "DeviceCodeResponse", schema: DeviceCodeResponse, description: "RFC 8628 section 3.2 device authorization response." },
  { name: "DeviceTokenRequest", schema: DeviceTokenRequest, input: true, description: "RFC 8628 section 3.4 token request." },
  { name: "DeviceTokenResponse", schema: DeviceTokenResponse, description: "The pairing token, once, when the user approved." },
  { name: "ConnectInfo", schema: ConnectInfo, description: "What the connect page shows." },
  { name: "DeviceLookupResponse", schema: DeviceLookupResponse, description: "The machine asking to be paired, by its user code." },
  { name: "UserCodeRequest", schema: UserCodeBody, input: true, description: "The user code the user entered." },
  { name: "DeviceAnswerResponse", schema: DeviceAnswerResponse },
  // sessions
  { name: "CreateSessionRequest", schema: CreateSessionRequest, input: true, description: "Mint a browser session for `user`." },
  { name: "Session", schema: SessionResponse, description: "An end-user session and the hosted pages it opens." },
  { name: "EndSessionsResponse", schema: EndSessionsResponse },
  // users, usage, plans
  { name: "User", schema: User, description: "A user's plan, allowance, usage this period and what is connected." },
  { name: "UsageRow", schema: UsageRow, description: "One row of the ledger." },
  { name: "UsagePage", schema: UsagePage, description: "A page of ledger rows in id order." },
  { name: "Plan", schema: Plan, description: "A plan the app sells." },
  { name: "PlanList", schema: PlanList },
  { name: "PlanInput", schema: PlanInput, input: true, description: "A new plan; fields left out take their defaults." },
  { name: "PlanUpdate", schema: PlanUpdate, input: true, description: "Only the fields sent change." },
  { name: "AssignPlanRequest", schema: AssignPlanRequest, input: true },
  // billing
  { name: "BillingAccount", schema: BillingAccount, description: "The app's connected Stripe account for one environment." },
  { name: "BillingAccountRequest", schema: BillingAccountRequest, input: true, identityOnly: true, description: "Anything: the call is refused (410 `connect_required`) whatever it carries." },
  { name: "BillingConnectRequest", schema: ConnectRequest, input: true },
  { name: "BillingConnectStart", schema: ConnectStart, description: "Where to send the app owner's browser to connect the account." },
  { name: "BillingConnectResult", schema: ConnectCallbackResult, description: "The Connect flow's outcome (without a `returnUrl`)." },
  { name: "BillingOverview", schema: BillingOverview, description: "Plans on sale and the session user's plan, allowance and usage." },
  { name: "CheckoutRequest", schema: CheckoutRequest, input: true },
  { name: "CheckoutSession", schema: CheckoutSession, description: "A Stripe Checkout Session in the app's connected account." },
  { name: "PortalRequest", schema: PortalRequest, input: true },
  { name: "PortalSession", schema: PortalSession, description: "A Stripe customer portal session." },
  { name: "StripeEvent", schema: StripeWebhookBody, input: true, identityOnly: true, description: "A Stripe event, as Stripe sends it; verified against the raw body with `Stripe-Signature`." },
  { name: "StripeWebhookAck", schema: StripeWebhookAck },
  // webhooks
  { name: "CreateWebhookEndpointRequest", schema: CreateWebhookEndpoint, input: true, description: "Where to send webhooks, and which." },
  { name: "WebhookEndpoint", schema: WebhookEndpoint, description: "A webhook endpoint of the app." },
  { name: "CreatedWebhookEndpoint", schema: CreatedWebhookEndpoint, description: "The new endpoint, with its signing secret (shown once)." },
  { name: "WebhookEndpointList", schema: WebhookEndpointList },
  { name: "WebhookAttempt", schema: WebhookAttempt, description: "One attempt at delivering a webhook." },
  { name: "WebhookDelivery", schema: WebhookDelivery, description: "One webhook sent (or being sent) to an endpoint, with its attempts." },
  { name: "WebhookDeliveryPage", schema: WebhookDeliveryPage, description: "A page of the delivery log, newest first." },
];
