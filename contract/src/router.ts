import { initContract } from "@ts-rest/core";
import { z } from "zod";
import { errorResponses, ROUTER_OPTIONS } from "./errors.js";
import { meta } from "./credentials.js";
import { ChatCompletion, ChatCompletionRequest, ModelList } from "./chat.js";
import {
  ApprovalRequest,
  ApprovalResponse,
  CancelRequest,
  CancelResponse,
  CreateRunRequest,
  Run,
  RunUsage,
  RunUsageResponse,
  ToolResultRequest,
  ToolResultResponse,
} from "./runs.js";
import {
  ConnectInfo,
  DeviceAnswerResponse,
  DeviceCodeRequest,
  DeviceCodeResponse,
  DeviceLookupResponse,
  DeviceTokenRequest,
  DeviceTokenResponse,
  MachineList,
  MachineRemoved,
  UserCodeBody,
  UserCodeQuery,
} from "./pairing.js";
import { CreateSessionRequest, EndSessionsQuery, EndSessionsResponse, SessionResponse } from "./sessions.js";
import { Compute, Plan, PlanList, PlanListQuery, UsagePage, UsageQuery, User } from "./reads.js";
import {
  AssignPlanRequest,
  BillingAccount,
  BillingAccountRequest,
  BillingOverview,
  CheckoutRequest,
  ConnectCallbackQuery,
  ConnectCallbackResult,
  ConnectRequest,
  ConnectStart,
  CheckoutSession,
  PlanInput,
  PlanSlugParam,
  PlanUpdate,
  PortalRequest,
  PortalSession,
  StripeWebhookAck,
  StripeWebhookBody,
} from "./billing.js";
import {
  CreatedWebhookEndpoint,
  CreateWebhookEndpoint,
  WebhookDeliveryPage,
  WebhookDeliveryQuery,
  WebhookEndpoint,
  WebhookEndpointList,
  WebhookEndpointParam,
} from "./webhooks.js";

import { ownerContract, type OwnerContract } from "./owner-router.js";

const c = initContract();

const errors = errorResponses;

/** A `text/event-stream` body (ts-rest has no stream type; OpenAPI gets it from here). */
const eventStream = c.otherResponse({ contentType: "text/event-stream", body: z.string() });

const runId = z.object({ id: z.string().min(1).max(64) });
const connectKeyParam = z.object({ pk: z.string().min(1).max(128).describe("The app's connect key, `pk_svc_...`.") });

const appKeyErrors = errors(401, 403);
const sessionErrors = errors(401, 403);
const notBuilt = errors(501);

/** Every route answers in the envelope, and only with the statuses it lists (and the common ones: bad input, unknown ids, rate limits, crashes). */
const OPTIONS = ROUTER_OPTIONS;

// The contract is declared in three parts, each its own type: one object literal of every
// route makes a type the declaration emitter refuses to write out (TS7056) when the
// packages are built (`npm pack`). `contract` is their union, key order kept; the
// app owner's routes (the dashboard) are two more such parts, in owner-router.ts.

/** Running: chat completions, runs and their answers, models (1-6). */
export const runningContract = c.router(
  {
    // 1
    createChatCompletion: {
      method: "POST",
      path: "/v1/chat/completions",
      summary: "Chat completions, OpenAI-compatible",
      description:
        "The standard chat-completions request plus `user` (required). `svc/echo` is answered by the service itself; `auto` and aliases route to a model runtime on the user's own machine, never to a subscription runtime. With `stream: true` the answer is `text/event-stream` of `chat.completion.chunk` frames ending in `data: [DONE]`. The run id is in the `Service-Run-Id` header.",
      body: ChatCompletionRequest,
      responses: { 200: ChatCompletion, ...errors(402, 409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 2
    createRun: {
      method: "POST",
      path: "/v1/runs",
      summary: "Start a run",
      description:
        "Starts one run for `user`; the service owns the agent loop. The answer is a `text/event-stream` of run events (see `RunEvent`), with `Service-Run-Id` in the headers before the first event. Not idempotent. 409 `serve_in_app` when nothing is reachable and the route allows `app` (the run is counted, its id in `Service-Run-Id`); 409 `no_compute` when the route does not allow `app`; 402 when the plan stops at its allowance.",
      body: CreateRunRequest,
      responses: { 200: eventStream, ...errors(402, 409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: where a run stands
    getRun: {
      method: "GET",
      path: "/v1/runs/:id",
      summary: "Read a run",
      description: "The run as stored: status, route, machine, output, stop reason, usage and the id of its last event.",
      pathParams: runId,
      responses: { 200: Run, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: re-attach to a run's stored events
    getRunEvents: {
      method: "GET",
      path: "/v1/runs/:id/events",
      summary: "Re-attach to a run's event stream",
      description:
        "The run's stored events after `Last-Event-ID` (header; or `after` in the query), then live ones until the run ends: no gap, no duplicate. At or past a finished run's last event: its final event again (its own id), then the stream ends. A reader more than 1 MiB behind is closed (`: closed: slow reader`) and re-attaches from its last id. A dropped stream never cancels a run.",
      pathParams: runId,
      headers: z.object({ "last-event-id": z.string().regex(/^\d{1,9}$/, "the sequence number of the last event received").optional() }),
      query: z.object({ after: z.coerce.number().int().min(0).max(999_999_999).optional().describe("Same as `Last-Event-ID`, for clients that cannot set headers.") }),
      responses: { 200: eventStream, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 3
    submitToolResult: {
      method: "POST",
      path: "/v1/runs/:id/tool_result",
      summary: "Answer a tool call",
      pathParams: runId,
      body: ToolResultRequest,
      responses: { 200: ToolResultResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 4
    submitApproval: {
      method: "POST",
      path: "/v1/runs/:id/approval",
      summary: "Answer an approval request",
      pathParams: runId,
      body: ApprovalRequest,
      responses: { 200: ApprovalResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 5
    cancelRun: {
      method: "POST",
      path: "/v1/runs/:id/cancel",
      summary: "Cancel a run (best effort)",
      pathParams: runId,
      body: CancelRequest,
      responses: { 200: CancelResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 6
    reportRunUsage: {
      method: "POST",
      path: "/v1/runs/:id/usage",
      summary: "Report the usage of a run the app served itself",
      description: "Accepted once per run, for runs handed back with `serve_in_app`.",
      pathParams: runId,
      body: RunUsage,
      responses: { 200: RunUsageResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: what can be asked for
    listModels: {
      method: "GET",
      path: "/v1/models",
      summary: "List models (OpenAI-compatible)",
      query: z.object({ user: z.string().max(256).optional() }),
      responses: { 200: ModelList, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
  },
  OPTIONS,
);

/** Pairing a machine, end-user sessions and the browser routes (7-15). */
export const pairingContract = c.router(
  {
    // 7
    requestDeviceCode: {
      method: "POST",
      path: "/c/:pk/v1/device/code",
      summary: "Start pairing a machine (RFC 8628 device authorization)",
      description: "No credential: the connect key in the path names the app and environment.",
      pathParams: connectKeyParam,
      body: DeviceCodeRequest,
      responses: { 200: DeviceCodeResponse, ...errors(401) },
      metadata: meta({ auth: "connectKey" }),
    },
    // 8
    pollDeviceToken: {
      method: "POST",
      path: "/c/:pk/v1/device/token",
      summary: "Poll for the pairing token (RFC 8628 token request)",
      description:
        "400 `authorization_pending` until the user answers; `slow_down` (with the widened `interval`) when polled too fast; `access_denied` after a denial; `expired_token` after expiry. The device code yields its pairing token exactly once.",
      pathParams: connectKeyParam,
      body: DeviceTokenRequest,
      responses: { 200: DeviceTokenResponse, ...errors(401) },
      metadata: meta({ auth: "connectKey" }),
    },
    // 8, as the spec's state table writes it: the device code alone names the app
    pollDeviceTokenAlias: {
      method: "POST",
      path: "/v1/device/token",
      summary: "Poll for the pairing token (same as `/c/{pk}/v1/device/token`)",
      description: "The spec's state table names the token poll `/v1/device/token`; it is the same call, the device code naming the app.",
      body: DeviceTokenRequest,
      responses: { 200: DeviceTokenResponse },
      metadata: meta({ auth: "none" }),
    },
    // 9
    createSession: {
      method: "POST",
      path: "/v1/end_users/session",
      summary: "Mint an end-user browser session",
      description: "A session acting for exactly `user`, for ten minutes. Send the user's browser to `url`.",
      body: CreateSessionRequest,
      responses: { 200: SessionResponse, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // 10
    endSessions: {
      method: "DELETE",
      path: "/v1/end_users/session",
      summary: "End every live session of a user",
      query: EndSessionsQuery,
      responses: { 200: EndSessionsResponse, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // 11
    getConnectInfo: {
      method: "GET",
      path: "/v1/connect",
      summary: "What the connect page shows: the app's name and the pairing command",
      responses: { 200: ConnectInfo, ...sessionErrors, ...errors(503) },
      metadata: meta({ auth: "session" }),
    },
    // 12
    lookupDevice: {
      method: "GET",
      path: "/v1/device/lookup",
      summary: "What is asking to be paired",
      query: UserCodeQuery,
      responses: { 200: DeviceLookupResponse, ...errors(409, 410), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // 13
    approveDevice: {
      method: "POST",
      path: "/v1/device/approve",
      summary: "Approve a pairing: binds the pairing token to the session's user",
      body: UserCodeBody,
      responses: { 200: DeviceAnswerResponse, ...errors(409, 410), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // 14
    denyDevice: {
      method: "POST",
      path: "/v1/device/deny",
      summary: "Deny a pairing: the worker is told `access_denied`",
      body: UserCodeBody,
      responses: { 200: DeviceAnswerResponse, ...errors(409, 410), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // 15
    listMachines: {
      method: "GET",
      path: "/v1/machines",
      summary: "This user's machines and their live state",
      responses: { 200: MachineList, ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // extension: the user removes one of their machines (the connect page's Remove)
    removeMachine: {
      method: "DELETE",
      path: "/v1/machines/:id",
      summary: "Remove one of this user's machines",
      description: "Its pairing token stops working at once and its connection is closed. Another user's machine is 404.",
      pathParams: z.object({ id: z.string().min(1).max(64) }),
      responses: { 200: MachineRemoved, ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
  },
  OPTIONS,
);

/** Reads of users, compute and usage, and plans (16-19 and their extensions). */
export const ledgerContract = c.router(
  {
    // 16
    getUser: {
      method: "GET",
      path: "/v1/users/:id",
      summary: "A user's plan, allowance, usage this period and what is connected",
      pathParams: z.object({ id: z.string().min(1).max(256) }),
      responses: { 200: User, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 17
    getUserCompute: {
      method: "GET",
      path: "/v1/users/:id/compute",
      summary: "A user's machines, runtimes, cost classes and live state",
      pathParams: z.object({ id: z.string().min(1).max(256) }),
      responses: { 200: Compute, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: the app revokes one of its user's machines
    revokeUserMachine: {
      method: "DELETE",
      path: "/v1/users/:id/machines/:machineId",
      summary: "Revoke one of a user's machines",
      description: "Its pairing token stops working at once and its connection is closed. A machine of another user, app or environment is 404.",
      pathParams: z.object({ id: z.string().min(1).max(256), machineId: z.string().min(1).max(64) }),
      responses: { 200: MachineRemoved, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // 18
    listUsage: {
      method: "GET",
      path: "/v1/usage",
      summary: "Usage rows of the ledger",
      description:
        "The ledger's rows in id order. Filter by `user`, `period` (`YYYY-MM`), `environment` (the key's own), `run` and `costClass`; paginated with `cursor` (`nextCursor` of the previous page). Amounts in integer micros; `costClass` on every row.",
      query: UsageQuery,
      responses: { 200: UsagePage, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 19
    listPlans: {
      method: "GET",
      path: "/v1/plans",
      summary: "The plans the app configured",
      description: "For rendering a pricing page. Archived plans only with `archived=true`.",
      query: PlanListQuery,
      responses: { 200: PlanList, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: the app configures its plans (also `svc plans ...` and `svc plans apply <file>`)
    createPlan: {
      method: "POST",
      path: "/v1/plans",
      summary: "Create a plan",
      description: "Price, period, allowance (runs or tokens), stop or overage, spend ceiling, trial and the Stripe price. `isDefault: true` makes it the plan users start on.",
      body: PlanInput,
      responses: { 201: Plan, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    updatePlan: {
      method: "PATCH",
      path: "/v1/plans/:slug",
      summary: "Change a plan",
      description: "Only the fields sent change. Subscribers see the change from their next run.",
      pathParams: PlanSlugParam,
      body: PlanUpdate,
      responses: { 200: Plan, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    archivePlan: {
      method: "DELETE",
      path: "/v1/plans/:slug",
      summary: "Archive a plan",
      description: "It is no longer sold nor the default; users on it keep it. Ledger rows are never removed.",
      pathParams: PlanSlugParam,
      responses: { 200: Plan, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    assignUserPlan: {
      method: "PUT",
      path: "/v1/users/:id/plan",
      summary: "Put a user on a plan",
      description: "Without a payment (a grant, a manual upgrade); `plan: null` returns the user to the default plan. A Stripe subscription, while live, takes precedence.",
      pathParams: z.object({ id: z.string().min(1).max(256) }),
      body: AssignPlanRequest,
      responses: { 200: User, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
  },
  OPTIONS,
);

/** The app's Stripe account and checkout, Stripe's webhooks, and outbound webhooks to the app (extensions). */
export const billingContract = c.router(
  {
    // extension: the app connects its Stripe account, through Stripe Connect only
    getBillingAccount: {
      method: "GET",
      path: "/v1/billing/account",
      summary: "The app's connected Stripe account",
      description: "The account connected for this environment, how it was connected, and its state as Stripe reports it (charges, onboarding, requirements).",
      responses: { 200: BillingAccount, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    connectBillingAccount: {
      method: "PUT",
      path: "/v1/billing/account",
      summary: "Refused: connect through Stripe Connect",
      description:
        "Attaching a Stripe account by its id is no longer accepted (anyone can name any account): always 410 `connect_required`, nothing attached. Use POST /v1/billing/connect.",
      deprecated: true,
      body: BillingAccountRequest,
      responses: { ...errors(410), ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    disconnectBillingAccount: {
      method: "DELETE",
      path: "/v1/billing/account",
      summary: "Disconnect the app's Stripe account",
      description:
        "Detaches the environment's account: checkout stops and its events name nobody. An account connected through OAuth is deauthorized at Stripe first (the platform's access to it ends); a created account stays its owner's. Without an account: the same answer.",
      body: c.noBody(),
      responses: { 200: BillingAccount, ...errors(503), ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    startBillingConnect: {
      method: "POST",
      path: "/v1/billing/connect",
      summary: "Start connecting the app's Stripe account (Stripe Connect)",
      description:
        "Answers the `url` to send the app owner's browser to. `oauth`: Stripe's OAuth authorization page for an existing account, with a single-use `state` (10 minutes) bound to this app and environment; the account is attached only when Stripe's callback proves the owner authorized it. `create`: the platform creates a Standard account for the app (or resumes the one it created), attaches it, and answers its onboarding link (Account Links). 503 when Stripe (or, for `oauth`, `STRIPE_CONNECT_CLIENT_ID`) is not configured; 429 with more than 20 flows in flight.",
      body: ConnectRequest,
      responses: { 200: ConnectStart, ...errors(503), ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    billingConnectCallback: {
      method: "GET",
      path: "/v1/billing/connect/callback",
      summary: "Stripe Connect's way back (browser)",
      description:
        "Where Stripe sends the app owner's browser: no credential, the `state` authenticates (unknown, used, expired: 400 `invalid_state`). OAuth: the code is exchanged with Stripe for the account's id, then attached (409 `account_in_use` when another app holds that account; `connect_denied` when the owner declined). Onboarding: the account's state is read from Stripe (`link=refresh`: a new onboarding link, 302). With the flow's `returnUrl`: 302 there with `stripe_connect=connected|onboarding|error` (and `code`); without: JSON.",
      query: ConnectCallbackQuery,
      responses: { 200: ConnectCallbackResult, 302: c.noBody(), ...errors(409, 503) },
      metadata: meta({ auth: "none" }),
    },
    // extension: what the plans and checkout components use (browser, `est_` session)
    getBilling: {
      method: "GET",
      path: "/v1/billing",
      summary: "Plans on sale and this user's plan, allowance and usage",
      responses: { 200: BillingOverview, ...sessionErrors, ...notBuilt },
      metadata: meta({ auth: "session" }),
    },
    createCheckoutSession: {
      method: "POST",
      path: "/v1/billing/checkout",
      summary: "Start checkout of a plan",
      description:
        "Creates a Stripe Checkout Session in the app's connected account, tagged with the user's id (`client_reference_id` and metadata), with the plan's trial. 409 `already_subscribed` while the user has a live Stripe subscription: plan changes go through the customer portal (POST /v1/billing/portal).",
      body: CheckoutRequest,
      responses: { 200: CheckoutSession, ...errors(409, 503), ...sessionErrors, ...notBuilt },
      metadata: meta({ auth: "session" }),
    },
    createPortalSession: {
      method: "POST",
      path: "/v1/billing/portal",
      summary: "Open the customer portal",
      description:
        "Creates a Stripe customer portal session in the app's connected account for the customer of the user's Stripe subscription: where the user changes plan, updates the card, sees invoices or cancels. 409 `no_subscription` when the user has none.",
      body: PortalRequest,
      responses: { 200: PortalSession, ...errors(409, 503), ...sessionErrors },
      metadata: meta({ auth: "session" }),
    },
    // extension: Stripe's webhooks (Connect events of the apps' accounts), verified by `Stripe-Signature`
    receiveStripeWebhook: {
      method: "POST",
      path: "/v1/stripe/webhook",
      summary: "Stripe webhook receiver",
      description: "Verified against the raw body, deduplicated by event id, applied in any order: sets the user's entitlement.",
      headers: z.object({ "stripe-signature": z.string().max(4096).optional() }),
      body: StripeWebhookBody,
      responses: { 200: StripeWebhookAck, ...notBuilt },
      metadata: meta({ auth: "none" }),
    },
    // extension: outbound webhooks to the app
    createWebhookEndpoint: {
      method: "POST",
      path: "/v1/webhook_endpoints",
      summary: "Add a webhook endpoint",
      description: "Returns the `whsec_` signing secret once. Deliveries are signed per Standard Webhooks and retried with backoff.",
      body: CreateWebhookEndpoint,
      responses: { 201: CreatedWebhookEndpoint, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    listWebhookEndpoints: {
      method: "GET",
      path: "/v1/webhook_endpoints",
      summary: "The app's webhook endpoints",
      responses: { 200: WebhookEndpointList, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    deleteWebhookEndpoint: {
      method: "DELETE",
      path: "/v1/webhook_endpoints/:id",
      summary: "Remove a webhook endpoint",
      description: "Disables it: its pending deliveries stop (they end `failed`) and nothing more is sent to it; it stays listed with `disabled: true` and its delivery log stays readable. Deleting it again answers the same; another app's or environment's endpoint is 404.",
      pathParams: WebhookEndpointParam,
      responses: { 200: WebhookEndpoint, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    listWebhookDeliveries: {
      method: "GET",
      path: "/v1/webhook_deliveries",
      summary: "The delivery log",
      description: "Every delivery of this app and environment with each attempt's status code or error, newest first. Filter by `endpoint`, `status` and `type`; paginated with `cursor` (the previous page's `nextCursor`). A delivery's `id` is the `webhook-id` its receiver saw.",
      query: WebhookDeliveryQuery,
      responses: { 200: WebhookDeliveryPage, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
  },
  OPTIONS,
);

export const contract: typeof runningContract & typeof pairingContract & typeof ledgerContract & typeof billingContract & OwnerContract = {
  ...runningContract,
  ...pairingContract,
  ...ledgerContract,
  ...billingContract,
  ...ownerContract,
};

export type Contract = typeof contract;
