import { initContract } from "@ts-rest/core";
import { z } from "zod";
import { COMMON_ERROR_STATUSES, ErrorEnvelope } from "./errors.js";
import { meta } from "./credentials.js";
import { PlanList, PlanListQuery, Plan, User } from "./reads.js";
import { AssignPlanRequest, BillingAccount, ConnectRequest, ConnectStart, PlanInput, PlanUpdate } from "./billing.js";
import { MachineRemoved } from "./pairing.js";
import { CreatedWebhookEndpoint, CreateWebhookEndpoint, WebhookDelivery, WebhookDeliveryPage, WebhookDeliveryQuery, WebhookEndpoint, WebhookEndpointList } from "./webhooks.js";
import {
  AcceptInviteRequest,
  AppParam,
  Conversions,
  CreateAppRequest,
  CreatedApp,
  CreatedKey,
  CreateKeyRequest,
  EnvParam,
  Invite,
  InviteRequest,
  KeyParam,
  MemberList,
  MemberParam,
  OwnerApp,
  OwnerKey,
  OwnerKeyList,
  OwnerMachineParam,
  OwnerMe,
  Owner,
  OwnerPlanParam,
  OwnerRunDetail,
  OwnerRunPage,
  OwnerRunParam,
  OwnerRunQuery,
  OwnerUserDetail,
  OwnerUserPage,
  OwnerUserParam,
  OwnerUserQuery,
  OwnerWebhookParam,
  RangeQuery,
  RotatedKey,
  RotateKeyRequest,
  SetPasswordRequest,
  SignedOut,
  SignInLinkRequest,
  SignInRequest,
  UsageSummary,
  WebhookTestResult,
} from "./owner.js";

const c = initContract();

function errors<S extends number>(...statuses: S[]): { [K in S]: typeof ErrorEnvelope } {
  return Object.fromEntries(statuses.map((s) => [s, ErrorEnvelope])) as { [K in S]: typeof ErrorEnvelope };
}

const OPTIONS = { strictStatusCodes: true, commonResponses: errors(...COMMON_ERROR_STATUSES) } as const;
/** Owner routes: the session cookie, and `X-CSRF-Token` on all but GETs; 403 when the owner is not a member of the app. */
const ownerErrors = errors(401, 403);
/** Every owner route but the sign-ins. */
const signedIn = meta({ auth: "owner" });
const noCredential = meta({ auth: "none" });
const ENV = "/v1/owner/apps/:app/env/:env";
const csv = c.otherResponse({ contentType: "text/csv", body: z.string() });

/** The owner's account, apps, members and keys. */
export const ownerAccountContract = c.router(
  {
    ownerSignIn: {
      method: "POST",
      path: "/v1/owner/sign_in",
      summary: "Sign in to the dashboard",
      description: "Email and password. Sets the `svc_owner` session cookie (HttpOnly, SameSite=Strict) and returns the CSRF token. Rate-limited per email and per address; a wrong email and a wrong password answer the same 401.",
      body: SignInRequest,
      responses: { 200: OwnerMe, ...errors(401) },
      metadata: noCredential,
    },
    ownerSignInWithLink: {
      method: "POST",
      path: "/v1/owner/sign_in/link",
      summary: "Sign in with a one-time link",
      description: "Redeems an `olt_` token printed by `svc dashboard` (single use, 15 minutes). Sets the session cookie.",
      body: SignInLinkRequest,
      responses: { 200: OwnerMe, ...errors(401) },
      metadata: noCredential,
    },
    ownerAcceptInvite: {
      method: "POST",
      path: "/v1/owner/invites/accept",
      summary: "Accept an invitation to an app",
      description: "Redeems an `oin_` invitation (single use, 7 days): joins the app, creating the account when the email has none. Sets the session cookie.",
      body: AcceptInviteRequest,
      responses: { 200: OwnerMe, ...errors(401) },
      metadata: noCredential,
    },
    ownerMe: {
      method: "GET",
      path: "/v1/owner/me",
      summary: "The signed-in owner",
      description: "The owner, the session's CSRF token and the apps they are a member of.",
      responses: { 200: OwnerMe, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSignOut: {
      method: "POST",
      path: "/v1/owner/sign_out",
      summary: "Sign out",
      body: c.noBody(),
      responses: { 200: SignedOut, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSignOutEverywhere: {
      method: "POST",
      path: "/v1/owner/sign_out_everywhere",
      summary: "Sign out of every session",
      description: "Ends every session of this owner, on every browser, this one included.",
      body: c.noBody(),
      responses: { 200: SignedOut, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSetPassword: {
      method: "PUT",
      path: "/v1/owner/password",
      summary: "Set or change the password",
      description: "Ends the owner's other sessions.",
      body: SetPasswordRequest,
      responses: { 200: Owner, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListApps: {
      method: "GET",
      path: "/v1/owner/apps",
      summary: "The owner's apps",
      responses: { 200: z.object({ data: z.array(OwnerApp) }), ...ownerErrors },
      metadata: signedIn,
    },
    ownerCreateApp: {
      method: "POST",
      path: "/v1/owner/apps",
      summary: "Create an app",
      description: "The owner becomes its first member (`owner`). Returns its test keys once.",
      body: CreateAppRequest,
      responses: { 201: CreatedApp, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListKeys: {
      method: "GET",
      path: "/v1/owner/apps/:app/keys",
      summary: "The app's keys",
      pathParams: AppParam,
      responses: { 200: OwnerKeyList, ...ownerErrors },
      metadata: signedIn,
    },
    ownerCreateKey: {
      method: "POST",
      path: "/v1/owner/apps/:app/keys",
      summary: "Create a key",
      description: "The secret is shown once. Members with role `owner` only.",
      pathParams: AppParam,
      body: CreateKeyRequest,
      responses: { 201: CreatedKey, ...ownerErrors },
      metadata: signedIn,
    },
    ownerRotateKey: {
      method: "POST",
      path: "/v1/owner/apps/:app/keys/:keyId/rotate",
      summary: "Rotate a key",
      description: "A new key replaces it; the old one keeps working for `graceSeconds`. Members with role `owner` only.",
      pathParams: KeyParam,
      body: RotateKeyRequest,
      responses: { 200: RotatedKey, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerRevokeKey: {
      method: "DELETE",
      path: "/v1/owner/apps/:app/keys/:keyId",
      summary: "Revoke a key",
      description: "At once. Members with role `owner` only.",
      pathParams: KeyParam,
      body: c.noBody(),
      responses: { 200: OwnerKey, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListMembers: {
      method: "GET",
      path: "/v1/owner/apps/:app/members",
      summary: "The app's members and open invitations",
      pathParams: AppParam,
      responses: { 200: MemberList, ...ownerErrors },
      metadata: signedIn,
    },
    ownerCreateInvite: {
      method: "POST",
      path: "/v1/owner/apps/:app/invites",
      summary: "Invite a member by link",
      description: "The link is shown once. Members with role `owner` only.",
      pathParams: AppParam,
      body: InviteRequest,
      responses: { 201: Invite, ...ownerErrors },
      metadata: signedIn,
    },
    ownerRemoveMember: {
      method: "DELETE",
      path: "/v1/owner/apps/:app/members/:ownerId",
      summary: "Remove a member",
      description: "Members with role `owner` only; the last `owner` cannot be removed (409).",
      pathParams: MemberParam,
      body: c.noBody(),
      responses: { 200: MemberList, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
  },
  OPTIONS,
);

// The per-environment routes are declared in two parts, each its own type: as one object literal
// their type is more than the declaration emitter writes out (TS7056 when the package is built).

/** One app environment's users, usage and runs. */
export const ownerUsageContract = c.router(
  {
    ownerListUsers: {
      method: "GET",
      path: `${ENV}/users`,
      summary: "End users",
      description: "Newest first; `q` searches ids and emails.",
      pathParams: EnvParam,
      query: OwnerUserQuery,
      responses: { 200: OwnerUserPage, ...ownerErrors },
      metadata: signedIn,
    },
    ownerGetUser: {
      method: "GET",
      path: `${ENV}/users/:user`,
      summary: "An end user",
      description: "Plan, allowance, usage this period, machines with live state and runtime versions, sessions.",
      pathParams: OwnerUserParam,
      responses: { 200: OwnerUserDetail, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSetUserPlan: {
      method: "PUT",
      path: `${ENV}/users/:user/plan`,
      summary: "Set an end user's plan",
      pathParams: OwnerUserParam,
      body: AssignPlanRequest,
      responses: { 200: User, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerRemoveMachine: {
      method: "DELETE",
      path: `${ENV}/users/:user/machines/:machineId`,
      summary: "Remove an end user's machine",
      pathParams: OwnerMachineParam,
      body: c.noBody(),
      responses: { 200: MachineRemoved, ...ownerErrors },
      metadata: signedIn,
    },
    ownerUsageSummary: {
      method: "GET",
      path: `${ENV}/usage/summary`,
      summary: "Usage by day and cost class, top users",
      pathParams: EnvParam,
      query: RangeQuery,
      responses: { 200: UsageSummary, ...ownerErrors },
      metadata: signedIn,
    },
    ownerUsageExport: {
      method: "GET",
      path: `${ENV}/usage/export`,
      summary: "Usage rows as CSV",
      description: "Every ledger row of the range, oldest first, amounts in integer micros.",
      pathParams: EnvParam,
      query: RangeQuery,
      responses: { 200: csv, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListRuns: {
      method: "GET",
      path: `${ENV}/runs`,
      summary: "Runs",
      description: "Newest first, filtered by user, status and route.",
      pathParams: EnvParam,
      query: OwnerRunQuery,
      responses: { 200: OwnerRunPage, ...ownerErrors },
      metadata: signedIn,
    },
    ownerGetRun: {
      method: "GET",
      path: `${ENV}/runs/:id`,
      summary: "A run inspected",
      description: "The run, its stored event timeline, approvals and who decided them, ledger rows, machine, and for a handed-back run the usage the app reported.",
      pathParams: OwnerRunParam,
      responses: { 200: OwnerRunDetail, ...ownerErrors },
      metadata: signedIn,
    },
  },
  OPTIONS,
);

/** One app environment's plans, billing, conversions and webhooks. */
export const ownerSettingsContract = c.router(
  {
    ownerListPlans: {
      method: "GET",
      path: `${ENV}/plans`,
      summary: "Plans",
      pathParams: EnvParam,
      query: PlanListQuery,
      responses: { 200: PlanList, ...ownerErrors },
      metadata: signedIn,
    },
    ownerCreatePlan: {
      method: "POST",
      path: `${ENV}/plans`,
      summary: "Create a plan",
      pathParams: EnvParam,
      body: PlanInput,
      responses: { 201: Plan, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerUpdatePlan: {
      method: "PATCH",
      path: `${ENV}/plans/:slug`,
      summary: "Edit a plan, or make it the default",
      pathParams: OwnerPlanParam,
      body: PlanUpdate,
      responses: { 200: Plan, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerArchivePlan: {
      method: "DELETE",
      path: `${ENV}/plans/:slug`,
      summary: "Archive a plan",
      pathParams: OwnerPlanParam,
      body: c.noBody(),
      responses: { 200: Plan, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerGetBillingAccount: {
      method: "GET",
      path: `${ENV}/billing/account`,
      summary: "The connected Stripe account",
      pathParams: EnvParam,
      responses: { 200: BillingAccount, ...errors(503), ...ownerErrors },
      metadata: signedIn,
    },
    ownerConnectBilling: {
      method: "POST",
      path: `${ENV}/billing/connect`,
      summary: "Connect a Stripe account",
      description: "Starts Stripe Connect: send the browser to `url`. 503 when Stripe (or, for `oauth`, `STRIPE_CONNECT_CLIENT_ID`) is not configured.",
      pathParams: EnvParam,
      body: ConnectRequest,
      responses: { 200: ConnectStart, ...errors(409, 503), ...ownerErrors },
      metadata: signedIn,
    },
    ownerConversions: {
      method: "GET",
      path: `${ENV}/conversions`,
      summary: "Trials, conversions and payments",
      pathParams: EnvParam,
      query: RangeQuery,
      responses: { 200: Conversions, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListWebhookEndpoints: {
      method: "GET",
      path: `${ENV}/webhook_endpoints`,
      summary: "Webhook endpoints",
      pathParams: EnvParam,
      responses: { 200: WebhookEndpointList, ...ownerErrors },
      metadata: signedIn,
    },
    ownerCreateWebhookEndpoint: {
      method: "POST",
      path: `${ENV}/webhook_endpoints`,
      summary: "Add a webhook endpoint",
      pathParams: EnvParam,
      body: CreateWebhookEndpoint,
      responses: { 201: CreatedWebhookEndpoint, ...ownerErrors },
      metadata: signedIn,
    },
    ownerDeleteWebhookEndpoint: {
      method: "DELETE",
      path: `${ENV}/webhook_endpoints/:id`,
      summary: "Remove a webhook endpoint",
      pathParams: OwnerWebhookParam,
      body: c.noBody(),
      responses: { 200: WebhookEndpoint, ...ownerErrors },
      metadata: signedIn,
    },
    ownerTestWebhookEndpoint: {
      method: "POST",
      path: `${ENV}/webhook_endpoints/:id/test`,
      summary: "Send a test event",
      description: "Queues a `test.ping` delivery to this endpoint only.",
      pathParams: OwnerWebhookParam,
      body: c.noBody(),
      responses: { 202: WebhookTestResult, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerListWebhookDeliveries: {
      method: "GET",
      path: `${ENV}/webhook_deliveries`,
      summary: "The delivery log",
      pathParams: EnvParam,
      query: WebhookDeliveryQuery,
      responses: { 200: WebhookDeliveryPage, ...ownerErrors },
      metadata: signedIn,
    },
    ownerResendWebhookDelivery: {
      method: "POST",
      path: `${ENV}/webhook_deliveries/:id/resend`,
      summary: "Resend a delivery",
      description: "Sends the same payload again under the same `webhook-id` (receivers deduplicate by it), as a new attempt; a delivery to a removed endpoint is 409.",
      pathParams: OwnerWebhookParam,
      body: c.noBody(),
      responses: { 202: WebhookDelivery, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
  },
  OPTIONS,
);

/** One app environment's users, usage, runs, plans, billing, conversions and webhooks. */
export const ownerDataContract: typeof ownerUsageContract & typeof ownerSettingsContract = { ...ownerUsageContract, ...ownerSettingsContract };

export const ownerContract: typeof ownerAccountContract & typeof ownerDataContract = { ...ownerAccountContract, ...ownerDataContract };
export type OwnerContract = typeof ownerContract;
