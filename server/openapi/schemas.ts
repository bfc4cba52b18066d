import { z } from "zod";
import * as R from "@svc/contract";

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

const RUN_EVENT_DESCRIPTIONS: Record<R.RunEvent["kind"], string> = {
  run_started: "First event of every run: where it goes (route, machine, runtime, model) and how it is billed.",
  text_delta: "A piece of the model's text for `turn`.",
  tool_call: "The model calls one of the app's tools: answer with `POST /v1/runs/{id}/tool_result` before `deadlineAt`.",
  approval_request: "The run waits for the app's decision: answer with `POST /v1/runs/{id}/approval` before `deadlineAt`.",
  usage: "What one turn used, and its cost class and amount.",
  activity: "Something an agent runtime did on its own (a command run, a file changed).",
  run_queued: "The run (or its next turn) waits for a free slot on the user's machine, whose runtime is at its cap: its place in the machine's queue and how long it waits (past `deadlineAt`: `compute_busy`).",
  turn_restarted: "The turn is run again from its start (its driving instance was lost): drop the turn's text so far.",
  run_completed: "Final: the run ended normally, with its whole output and usage.",
  run_failed: "Final: the run failed; `stopReason` says why.",
  run_cancelled: "Final: the run was cancelled; `output` is what was produced before.",
  run_paused:
    "The run stopped between turns at a limit (the plan's spend ceiling, a tokens plan's allowance, its own budget) and holds no job on the machine: which limit, the amounts, where the user stands, when the pause expires (`pause_expired`) and what resumes it. The stream stays open.",
  run_resumed: "The limit that paused the run no longer holds (an upgrade, a new window, a raised budget): it goes on from where it stopped.",
  user_message: "A message the app added while the run worked (`POST /v1/runs/{id}/messages`), where the agent got it: mid-turn on an agent CLI (`now`), or before the next model call (`next_turn`).",
  session_restarted: "A follow-up's agent CLI session could not be continued and the app asked for a fresh one (`onSessionLost: restart`): the run goes on in a new session with the stored transcript as context.",
};

/** `response.output_text.delta` → `ResponseOutputTextDeltaEvent`; `error` → `ResponseErrorEvent`. */
const responseEventName = (type: string) => (type === "error" ? "ResponseErrorEvent" : `${pascal(type.replace(/\./g, "_"))}Event`);
const RESPONSE_EVENT_DESCRIPTIONS: Record<string, string> = {
  "response.created": "First: the response, `in_progress`.",
  "response.in_progress": "Second: the response is being generated.",
  "response.output_item.added": "An output item begins (a message, or a function call with empty arguments).",
  "response.content_part.added": "A content part of the message begins.",
  "response.output_text.delta": "Text of the message, as the model says it.",
  "response.output_text.done": "The message's whole text.",
  "response.content_part.done": "The content part, whole.",
  "response.function_call_arguments.delta": "Arguments of a function call.",
  "response.function_call_arguments.done": "A function call's whole arguments.",
  "response.output_item.done": "An output item, whole.",
  "response.completed": "Final: the response, `completed`.",
  "response.incomplete": "Final: the response stopped at `max_output_tokens`, or its run was cancelled (`incomplete_details.reason`).",
  "response.failed": "Final: the response failed; `error` says why.",
  error: "Final: the stream itself failed before the response ended (a reader too slow for its buffer); read the response with `GET /v1/responses/{id}`.",
};

const runEventKinds = R.RunEvent.options.map((o) => ({
  name: runEventSchemaName(o.shape.kind.value),
  schema: o as z.ZodTypeAny,
  description: RUN_EVENT_DESCRIPTIONS[o.shape.kind.value as R.RunEvent["kind"]],
}));

const chatRole = (role: string) => R.ChatMessage.options.find((o) => o.shape.role.value === role)!;
const chatUsage = (R.ChatCompletion.shape.usage as z.ZodOptional<z.ZodTypeAny>).unwrap();

export const NAMED_SCHEMAS: NamedSchema[] = [
  // errors
  { name: "Error", schema: R.ErrorEnvelope },
  { name: "ErrorBody", schema: R.ErrorBody },
  // shared enums
  { name: "Environment", schema: R.Environment },
  { name: "CostClass", schema: R.CostClass },
  { name: "RouteKind", schema: R.RouteKind, description: "Where a run may go: the user's own hardware (a model runtime), the user's own subscription (an agent CLI), or back to the app." },
  { name: "RunRoute", schema: R.RunRoute, description: "Where a run went: a route kind, or `service` (the service answered it itself, `svc/echo`: no machine, cost class `free`)." },
  { name: "RuntimeKind", schema: R.RuntimeKind },
  { name: "LiveState", schema: R.LiveState, description: "A machine's or runtime's live state." },
  { name: "RunStatus", schema: R.RunStatus, description: "Where a run stands." },
  { name: "WebhookEventType", schema: R.WebhookEventType, description: "The kinds of webhook the service sends." },
  // runs
  { name: "CreateRunRequest", schema: R.CreateRunRequest, input: true, description: "Start a run for `user`." },
  { name: "Tool", schema: R.Tool, input: true, description: "An app tool the run may call. The model sees `name`, `description` and `parameters`." },
  { name: "RunLimits", schema: R.RunLimits, input: true, description: "Deadlines and bounds of one run." },
  { name: "Run", schema: R.Run, description: "A run as stored: the authoritative view of where it stands." },
  { name: "RunEvent", schema: R.RunEvent, description: "One event of a run's `text/event-stream` (the JSON of its `data:`); `kind` is also the frame's `event:`." },
  ...runEventKinds,
  { name: "TokenUsage", schema: R.TokenUsage, description: "Tokens used, their cost class and amount in integer micros." },
  { name: "ToolResultRequest", schema: R.ToolResultRequest, input: true, description: "The app's answer to a `tool_call`." },
  { name: "ToolResultResponse", schema: R.ToolResultResponse },
  { name: "ApprovalRequest", schema: R.ApprovalRequest, input: true, description: "The app's answer to an `approval_request`." },
  { name: "ApprovalResponse", schema: R.ApprovalResponse },
  { name: "CancelRequest", schema: R.CancelRequest, input: true, description: "Optional: why, and the run's user." },
  { name: "RunBudget", schema: R.RunBudget, input: true, description: "A cap on one run, in integer micros (as a string) and/or tokens; checked between turns (the overshoot is at most one turn)." },
  { name: "RunBudgetStanding", schema: R.RunBudgetStanding, description: "A run's budget against what it used." },
  { name: "RaiseBudgetRequest", schema: R.RaiseBudgetRequest, input: true, description: "A run's new budget: each field given replaces its value." },
  { name: "RaiseBudgetResponse", schema: R.RaiseBudgetResponse },
  { name: "AllowanceThresholdData", schema: R.AllowanceThresholdData, description: "The `data` of an `allowance.threshold` webhook: a threshold of the plan reached, once per user, window, measure and threshold." },
  { name: "RunPausedData", schema: R.RunPausedData, description: "The `data` of a `run.paused` webhook: once per pause." },
  { name: "RunResumedData", schema: R.RunResumedData, description: "The `data` of a `run.resumed` webhook: once per pause that ended in a resume." },
  { name: "RunMessageRequest", schema: R.RunMessageRequest, input: true, description: "A user message for a run that works (steering)." },
  { name: "RunMessageResponse", schema: R.RunMessageResponse, description: "The message taken: its id (its `user_message` event carries it) and how it reaches the agent." },
  { name: "CancelResponse", schema: R.CancelResponse },
  { name: "RunUsageReport", schema: R.RunUsage, input: true, description: "What a run the app served itself (after `serve_in_app`) used." },
  { name: "RunUsageResponse", schema: R.RunUsageResponse, description: "The ledger row recorded for the reported usage." },
  // chat
  { name: "ChatCompletionRequest", schema: R.ChatCompletionRequest, input: true, description: "The standard chat-completions request, plus `user` (required here). Unknown fields are accepted and ignored." },
  { name: "ChatMessage", schema: R.ChatMessage, input: true, description: "One message of the conversation, by `role`." },
  { name: "ChatSystemMessage", schema: chatRole("system"), input: true },
  { name: "ChatDeveloperMessage", schema: chatRole("developer"), input: true },
  { name: "ChatUserMessage", schema: chatRole("user"), input: true },
  { name: "ChatAssistantMessage", schema: chatRole("assistant"), input: true },
  { name: "ChatToolMessage", schema: chatRole("tool"), input: true },
  { name: "ChatTool", schema: R.ChatTool, input: true, description: "A function the model may call; the caller owns the loop." },
  { name: "ChatCompletion", schema: R.ChatCompletion, description: "A chat completion (`stream` absent or false)." },
  { name: "ChatCompletionChunk", schema: R.ChatCompletionChunk, description: "One `data:` frame of a streamed completion (`stream: true`); the stream ends with `data: [DONE]`." },
  {
    name: "ChatCompletionStreamFrame",
    schema: R.ChatCompletionStreamFrame,
    description: "One `data:` frame of a streamed completion (`stream: true`): a `ChatCompletionChunk`, or, when the completion fails after streaming began, the `Error` envelope as the last frame (then no `data: [DONE]`).",
  },
  { name: "ChatUsage", schema: chatUsage, description: "Tokens of a chat completion." },
  // responses
  { name: "CreateResponseRequest", schema: R.CreateResponseRequest, input: true, description: "The Responses request, plus `user` (or `safety_identifier`: required here). Unknown fields are accepted and ignored; what the service cannot do (a built-in tool, `background`) is a 400 naming it." },
  { name: "ResponseInputMessage", schema: R.ResponseInputMessage, input: true, description: "A message item of the input (`type` may be left out); content as a string or `input_text` / `input_image` parts (`output_text` in an assistant message sent back)." },
  { name: "ResponseFunctionCallInput", schema: R.ResponseFunctionCallInput, input: true, description: "A function call of an earlier response, sent back." },
  { name: "ResponseFunctionCallOutputInput", schema: R.ResponseFunctionCallOutputInput, input: true, description: "The output of a function the caller ran, for the call `call_id`." },
  { name: "ResponseFunctionTool", schema: R.ResponseFunctionTool, description: "A function the model may call; the caller runs it (as echoed on the response, every field present)." },
  { name: "Response", schema: R.ResponseObject, description: "A response (the Open Responses `ResponseResource`): without `stream`, the answer of `POST /v1/responses`; also what `GET /v1/responses/{id}` reads." },
  { name: "ResponseOutputMessage", schema: R.ResponseOutputMessage, description: "The model's message." },
  { name: "ResponseOutputText", schema: R.ResponseOutputText, description: "Text of the model's message." },
  { name: "ResponseFunctionCall", schema: R.ResponseFunctionCall, description: "A call of one of the caller's function tools: run it, and send its output back as a `function_call_output` item." },
  { name: "ResponseOutputItem", schema: R.ResponseOutputItem, description: "An output item, by `type`." },
  { name: "ResponseUsage", schema: R.ResponseUsage, description: "Tokens of a response (input includes cached tokens)." },
  { name: "ResponseDeleted", schema: R.ResponseDeleted },
  { name: "ResponseInputItemList", schema: R.ResponseInputItemList, description: "A page of a stored response's input items." },
  { name: "ResponseStreamEvent", schema: R.ResponseStreamEvent, description: "One event of a streamed response (`stream: true`): the frame's `event:` is its `type`, its `data:` this JSON; `sequence_number` counts from 0. The stream ends with `data: [DONE]`." },
  ...R.ResponseStreamEvent.options.map((o) => ({ name: responseEventName(o.shape.type.value), schema: o as z.ZodTypeAny, description: RESPONSE_EVENT_DESCRIPTIONS[o.shape.type.value] })),
  { name: "ModelList", schema: R.ModelList, description: "What can be asked for: `svc/echo`, `auto`, and the models the user's machines serve now." },
  // machines and pairing
  { name: "Runtime", schema: R.Runtime, description: "A model server or agent CLI on a user's machine." },
  { name: "Machine", schema: R.Machine, description: "A paired machine of a user and its runtimes." },
  { name: "MachineList", schema: R.MachineList },
  { name: "MachineRemoved", schema: R.MachineRemoved },
  { name: "Compute", schema: R.Compute, description: "A user's machines, runtimes, cost classes and live state." },
  { name: "DeviceCodeRequest", schema: R.DeviceCodeRequest, input: true, description: "The machine asking to be paired." },
  { name: "DeviceCodeResponse", schema: R.DeviceCodeResponse, description: "RFC 8628 section 3.2 device authorization response." },
  { name: "DeviceTokenRequest", schema: R.DeviceTokenRequest, input: true, description: "RFC 8628 section 3.4 token request." },
  { name: "DeviceTokenResponse", schema: R.DeviceTokenResponse, description: "The pairing token, once, when the user approved." },
  { name: "ConnectInfo", schema: R.ConnectInfo, description: "What the connect page shows." },
  { name: "DeviceLookupResponse", schema: R.DeviceLookupResponse, description: "The machine asking to be paired, by its user code." },
  { name: "UserCodeRequest", schema: R.UserCodeBody, input: true, description: "The user code the user entered." },
  { name: "DeviceAnswerResponse", schema: R.DeviceAnswerResponse },
  // sessions
  { name: "CreateSessionRequest", schema: R.CreateSessionRequest, input: true, description: "Mint a browser session for `user`." },
  { name: "Session", schema: R.SessionResponse, description: "An end-user session and the hosted pages it opens." },
  { name: "EndSessionsResponse", schema: R.EndSessionsResponse },
  // users, usage, plans
  { name: "Standing", schema: R.Standing, description: "Where a user stands against their plan in its window: the user view's `allowance`, and a 402's `error.allowance`." },
  { name: "User", schema: R.User, description: "A user's plan, allowance, usage this period and what is connected." },
  { name: "UsageRow", schema: R.UsageRow, description: "One row of the ledger." },
  { name: "UsagePage", schema: R.UsagePage, description: "A page of ledger rows in id order." },
  { name: "Plan", schema: R.Plan, description: "A plan the app sells." },
  { name: "PlanList", schema: R.PlanList },
  { name: "PlanInput", schema: R.PlanInput, input: true, description: "A new plan; fields left out take their defaults." },
  { name: "PlanUpdate", schema: R.PlanUpdate, input: true, description: "Only the fields sent change." },
  { name: "AssignPlanRequest", schema: R.AssignPlanRequest, input: true },
  // billing
  { name: "BillingAccount", schema: R.BillingAccount, description: "The app's connected Stripe account for one environment." },
  { name: "BillingAccountRequest", schema: R.BillingAccountRequest, input: true, identityOnly: true, description: "Anything: the call is refused (410 `connect_required`) whatever it carries." },
  { name: "BillingConnectRequest", schema: R.ConnectRequest, input: true },
  { name: "BillingConnectStart", schema: R.ConnectStart, description: "Where to send the app owner's browser to connect the account." },
  { name: "BillingConnectResult", schema: R.ConnectCallbackResult, description: "The Connect flow's outcome (without a `returnUrl`)." },
  { name: "BillingOverview", schema: R.BillingOverview, description: "Plans on sale and the session user's plan, allowance and usage." },
  { name: "CheckoutRequest", schema: R.CheckoutRequest, input: true },
  { name: "CheckoutSession", schema: R.CheckoutSession, description: "A Stripe Checkout Session in the app's connected account." },
  { name: "PortalRequest", schema: R.PortalRequest, input: true },
  { name: "PortalSession", schema: R.PortalSession, description: "A Stripe customer portal session." },
  { name: "StripeEvent", schema: R.StripeWebhookBody, input: true, identityOnly: true, description: "A Stripe event, as Stripe sends it; verified against the raw body with `Stripe-Signature`." },
  { name: "StripeWebhookAck", schema: R.StripeWebhookAck },
  // webhooks
  { name: "CreateWebhookEndpointRequest", schema: R.CreateWebhookEndpoint, input: true, description: "Where to send webhooks, and which." },
  { name: "WebhookEndpoint", schema: R.WebhookEndpoint, description: "A webhook endpoint of the app." },
  { name: "CreatedWebhookEndpoint", schema: R.CreatedWebhookEndpoint, description: "The new endpoint, with its signing secret (shown once)." },
  { name: "WebhookEndpointList", schema: R.WebhookEndpointList },
  { name: "WebhookAttempt", schema: R.WebhookAttempt, description: "One attempt at delivering a webhook." },
  { name: "WebhookDelivery", schema: R.WebhookDelivery, description: "One webhook sent (or being sent) to an endpoint, with its attempts." },
  { name: "WebhookDeliveryPage", schema: R.WebhookDeliveryPage, description: "A page of the delivery log, newest first." },
  // the dashboard: the owner's account, apps, members and keys
  { name: "MemberRole", schema: R.MemberRole },
  { name: "SignInRequest", schema: R.SignInRequest, input: true, description: "Email and password." },
  { name: "SignInLinkRequest", schema: R.SignInLinkRequest, input: true, description: "The token of a one-time sign-in link." },
  { name: "AcceptInviteRequest", schema: R.AcceptInviteRequest, input: true, description: "The invitation's token and who accepts it." },
  { name: "SetPasswordRequest", schema: R.SetPasswordRequest, input: true },
  { name: "Owner", schema: R.Owner, description: "An app owner's dashboard account." },
  { name: "OwnerApp", schema: R.OwnerApp, description: "An app the owner is a member of, and their role in it." },
  { name: "OwnerAppList", schema: z.object({ data: z.array(R.OwnerApp) }) },
  { name: "OwnerMe", schema: R.OwnerMe, description: "The signed-in owner, the session's CSRF token and their apps." },
  { name: "SignedOut", schema: R.SignedOut },
  { name: "CreateAppRequest", schema: R.CreateAppRequest, input: true },
  { name: "CreatedApp", schema: R.CreatedApp, description: "The new app and its test keys (shown once)." },
  { name: "OwnerKey", schema: R.OwnerKey, description: "An app key or connect key as the dashboard lists it: never a secret." },
  { name: "OwnerKeyList", schema: R.OwnerKeyList },
  { name: "CreatedKey", schema: R.CreatedKey, description: "A new key with its whole value, shown once." },
  { name: "CreateKeyRequest", schema: R.CreateKeyRequest, input: true },
  { name: "RotateKeyRequest", schema: R.RotateKeyRequest, input: true },
  { name: "RenameKeyRequest", schema: R.RenameKeyRequest, input: true },
  { name: "RotatedKey", schema: R.RotatedKey, description: "The rotated key (working until its `expiresAt`) and the new one." },
  { name: "Member", schema: R.Member, description: "A member of an app and their role." },
  { name: "MemberList", schema: R.MemberList, description: "The app's members and its open invitations." },
  { name: "InviteRequest", schema: R.InviteRequest, input: true },
  { name: "Invite", schema: R.Invite, description: "An invitation link (shown once)." },
  // the dashboard, per app and environment
  { name: "OwnerUserRow", schema: R.OwnerUserRow, description: "An end user as the dashboard lists them." },
  { name: "OwnerUserPage", schema: R.OwnerUserPage },
  { name: "OwnerSession", schema: R.OwnerSession, description: "An end user's browser session." },
  { name: "OwnerUserDetail", schema: R.OwnerUserDetail },
  { name: "UsageSummary", schema: R.UsageSummary, description: "Usage by day and cost class, totals and top users." },
  { name: "OwnerRunPage", schema: R.OwnerRunPage },
  { name: "StoredRunEvent", schema: R.StoredRunEvent, description: "A run event as stored." },
  { name: "OwnerApproval", schema: R.OwnerApproval, description: "An approval a run asked for, and who decided it." },
  { name: "OwnerToolCall", schema: R.OwnerToolCall, description: "A call of one of the app's tools, and the app's answer (cut at 64 KiB)." },
  { name: "OwnerOverview", schema: R.OwnerOverview, description: "One environment at a glance: the dashboard's landing page." },
  { name: "OwnerApiRequest", schema: R.OwnerApiRequest, description: "One API request the app made with one of its app keys." },
  { name: "OwnerApiRequestPage", schema: R.OwnerApiRequestPage, description: "The request log, newest first, with how long requests are kept." },
  { name: "OwnerRunDetail", schema: R.OwnerRunDetail, description: "A run inspected: events, approvals, tool calls and the app's answers, ledger rows, machine." },
  { name: "Conversions", schema: R.Conversions, description: "Trials, conversions and payments." },
  { name: "WebhookTestResult", schema: R.WebhookTestResult },
];
