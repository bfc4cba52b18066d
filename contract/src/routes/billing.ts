import { z } from "zod";
import { meta } from "../credentials.js";
import {
  BillingAccount,
  BillingAccountRequest,
  BillingOverview,
  CheckoutRequest,
  ConnectCallbackQuery,
  ConnectCallbackResult,
  ConnectRequest,
  ConnectStart,
  CheckoutSession,
  PortalRequest,
  PortalSession,
  StripeWebhookAck,
  StripeWebhookBody,
} from "../billing.js";
import {
  CreatedWebhookEndpoint,
  CreateWebhookEndpoint,
  WebhookDeliveryPage,
  WebhookDeliveryQuery,
  WebhookEndpoint,
  WebhookEndpointList,
  WebhookEndpointParam,
} from "../webhooks.js";
import { appKeyErrors, c, errors, notBuilt, OPTIONS, sessionErrors } from "./shared.js";

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
        "Answers the `url` to send the app owner's browser to. `oauth`: Stripe's OAuth authorization page for an existing account, with a single-use `state` (10 minutes) bound to this app and environment; the account is attached only when Stripe's callback proves the owner authorized it. `create`: the platform creates a Standard account for the app (or resumes the one it created), attaches it, and answers its onboarding link (Account Links). 501 `not_configured` when Stripe (or, for `oauth`, `STRIPE_CONNECT_CLIENT_ID`) is not configured; 429 with more than 20 flows in flight.",
      body: ConnectRequest,
      responses: { 200: ConnectStart, ...errors(501, 503), ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    billingConnectCallback: {
      method: "GET",
      path: "/v1/billing/connect/callback",
      summary: "Stripe Connect's way back (browser)",
      description:
        "Where Stripe sends the app owner's browser: no credential, the `state` authenticates (unknown, used, expired: 400 `invalid_state`). OAuth: the code is exchanged with Stripe for the account's id, then attached (409 `account_in_use` when another app holds that account; `connect_denied` when the owner declined). Onboarding: the account's state is read from Stripe (`link=refresh`: a new onboarding link, 302). With the flow's `returnUrl`: 302 there with `stripe_connect=connected|onboarding|error` (and `code`); without: JSON.",
      query: ConnectCallbackQuery,
      // 401: a credential sent to a route that takes none (wrong_credential_kind).
      responses: { 200: ConnectCallbackResult, 302: c.noBody(), ...errors(401, 409, 501, 503) },
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
      responses: { 200: PortalSession, ...errors(409, 501, 503), ...sessionErrors },
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
      // 401: a credential sent to a route that takes none (wrong_credential_kind); Stripe's own signature is checked in the body's handler.
      responses: { 200: StripeWebhookAck, ...errors(401), ...notBuilt },
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
