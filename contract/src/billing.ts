import { z } from "zod";
import { AllowanceUnit, Plan, PlanPeriod, User } from "./reads.js";
import { Environment, IsoTime, Micros, UserId } from "./common.js";
import { PauseLimit } from "./runs.js";

/**
 * Plans the app configures (app key, or `svc plans ...`), the Stripe account it
 * connects, and what the end user's browser does with them (the plans and
 * checkout components and the hosted `/billing` page, with an `est_` session).
 */

const Slug = z.string().min(1).max(64).regex(/^[a-z0-9][a-z0-9_-]*$/, "lowercase letters, digits, - and _");

const AlertThresholds = z
  .array(z.number().int().min(1).max(100))
  .max(10)
  .refine((t) => new Set(t).size === t.length, "each threshold once")
  .describe("Percentages (1-100) of the allowance, or of the spend ceiling when the allowance is unlimited, at which `allowance.threshold` is sent once per user and window. Default 80 and 100; [] sends none.");

export const PlanInput = z.object({
  slug: Slug,
  name: z.string().min(1).max(200),
  description: z.string().max(2000).nullable().optional(),
  priceMicros: Micros.min(0).default(0).describe("The price per period, integer micros."),
  currency: z.string().regex(/^[a-z]{3}$/, "ISO 4217, lowercase").default("usd"),
  period: PlanPeriod.default("month"),
  allowance: z
    .object({ unit: AllowanceUnit, limit: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable() })
    .default({ unit: "runs", limit: null })
    .describe("What the plan includes per period; `limit: null` is unlimited."),
  overage: z.boolean().default(false).describe("False: the run that would pass the allowance gets 402. True: it runs, as overage."),
  overagePriceMicros: Micros.min(0).nullable().optional(),
  spendCeilingMicros: Micros.min(0).nullable().optional(),
  alertThresholds: AlertThresholds.default([80, 100]),
  trialDays: z.number().int().min(0).max(730).default(0),
  stripePriceId: z.string().min(1).max(255).nullable().optional(),
  isDefault: z.boolean().default(false).describe("Makes this the plan users start on (the previous default stops being one)."),
});
export type PlanInput = z.infer<typeof PlanInput>;

export const PlanUpdate = PlanInput.omit({ slug: true }).partial().extend({
  // `.partial()` keeps the defaults of PlanInput; an update must not reset fields it does not name.
  priceMicros: Micros.min(0).optional(),
  currency: z.string().regex(/^[a-z]{3}$/).optional(),
  period: PlanPeriod.optional(),
  allowance: z.object({ unit: AllowanceUnit, limit: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable() }).optional(),
  overage: z.boolean().optional(),
  alertThresholds: AlertThresholds.optional(),
  trialDays: z.number().int().min(0).max(730).optional(),
  isDefault: z.boolean().optional(),
});
export type PlanUpdate = z.infer<typeof PlanUpdate>;

export const PlanSlugParam = z.object({ slug: Slug });

export const AssignPlanRequest = z.object({
  plan: Slug.nullable().describe("The plan's slug; null puts the user back on the default plan."),
});

/** `PUT /v1/billing/account` with a bare account id is refused (410 `connect_required`): whatever it carries, it attaches nothing. */
export const BillingAccountRequest = z.unknown();

const Requirements = z
  .object({
    currentlyDue: z.array(z.string()).describe("What Stripe needs now before the account can take (or keep taking) charges."),
    pastDue: z.array(z.string()),
    disabledReason: z.string().nullable().describe("Why charges are disabled, in Stripe's words (`requirements.past_due`, ...)."),
  })
  .describe("The account's `requirements`, as Stripe last reported them.");

/** How the app's Stripe account came to be attached. */
export const ConnectedVia = z.enum(["oauth", "created", "legacy"]);
export type ConnectedVia = z.infer<typeof ConnectedVia>;

export const BillingAccount = z.object({
  environment: Environment,
  stripeAccountId: z.string().nullable().describe("The connected account, `acct_...`; null until one is connected."),
  connectedVia: ConnectedVia.nullable()
    .describe("`oauth`: its owner authorized the platform through Stripe Connect OAuth; `created`: the platform created it for the app (onboarding through Account Links); `legacy`: attached by a bare id before Connect was required (unverified: another app connecting it through OAuth displaces it)."),
  connectedAt: z.string().datetime().nullable(),
  chargesEnabled: z.boolean().nullable().describe("Stripe's `charges_enabled`: checkout is refused while it is false. Null: not known."),
  detailsSubmitted: z.boolean().nullable().describe("Stripe's `details_submitted`: false while onboarding is unfinished."),
  payoutsEnabled: z.boolean().nullable(),
  requirements: Requirements.nullable(),
  checkedAt: z.string().datetime().nullable().describe("When Stripe last described the account (read again on this request when older than 30 seconds, and on its `account.updated` events)."),
  webhookUrl: z.string().describe("Where Stripe must send this account's events (a Connect webhook of the platform)."),
});

export const ConnectRequest = z.object({
  mode: z
    .enum(["oauth", "create"])
    .describe("`oauth`: connect an existing Stripe account (Standard) through Stripe's OAuth; its owner signs in to Stripe and authorizes the platform. `create`: the platform creates an account for the app (or resumes the one it created) and its owner onboards through a Stripe Account Link."),
  returnUrl: z
    .string()
    .url()
    .max(2000)
    .optional()
    .describe("Where the browser goes when the flow ends (http or https), with `stripe_connect=connected|onboarding|error` (and `code` on error) added; default: the callback answers JSON."),
});
export const ConnectStart = z.object({
  mode: z.enum(["oauth", "create"]),
  url: z.string().describe("Send the app owner's browser here: Stripe's OAuth authorization page, or the account's onboarding link."),
  expiresAt: z.string().datetime().describe("When the flow's `state` expires (single use)."),
  stripeAccountId: z.string().nullable().describe("`create`: the account the platform created (attached at once, onboarding pending); `oauth`: null until the owner authorizes."),
});

/** Which way an Account Link sends the owner back: `return` once onboarding is left, `refresh` when the link expired. */
export const ConnectLink = z.enum(["return", "refresh"]);
export type ConnectLink = z.infer<typeof ConnectLink>;

export const ConnectCallbackQuery = z.object({
  state: z.string().max(200).optional().describe("The flow's state, as handed to Stripe: it authenticates this call."),
  code: z.string().max(500).optional().describe("OAuth: the authorization code (`ac_...`)."),
  scope: z.string().max(100).optional(),
  error: z.string().max(200).optional().describe("OAuth: Stripe's error, e.g. `access_denied` when the owner declined."),
  error_description: z.string().max(1000).optional(),
  link: ConnectLink.optional().describe("Onboarding: `refresh` when the Account Link expired (a new one is made), else the way back."),
});
export const ConnectCallbackResult = z.object({
  outcome: z.enum(["connected", "onboarding"]).describe("`onboarding`: the account is attached but Stripe still needs details from its owner."),
  account: BillingAccount,
});

/** Why checkout cannot start for this app now (null while it can). */
export const CheckoutUnavailableReason = z
  .enum(["stripe_not_configured", "account_not_connected", "charges_not_enabled"])
  .describe(
    "`stripe_not_configured`: the service has no Stripe key (the operator's `STRIPE_SECRET_KEY`); `account_not_connected`: the app has not connected a Stripe account; `charges_not_enabled`: the app's account is connected but Stripe does not let it take charges yet (onboarding unfinished, or charges disabled). A plan without a Stripe price is not sold through checkout either: that is per plan (`stripePriceId` null).",
  );

/** What the plans and checkout components render for the session's user. */
export const BillingOverview = z.object({
  user: UserId,
  plans: z.array(Plan),
  current: User.pick({ plan: true, subscription: true, allowance: true, usage: true }),
  checkoutAvailable: z.boolean().describe("False until the app connects a Stripe account that can take charges (and the service has a Stripe key): `checkoutUnavailableReason` says which."),
  checkoutUnavailableReason: CheckoutUnavailableReason.nullable(),
  checkoutUnavailableMessage: z.string().nullable().describe("The reason in words an end user can be shown; null while checkout is available."),
  portalAvailable: z
    .boolean()
    .describe("The user has a Stripe subscription to manage (live, or with a failed payment to fix): plan changes go through the customer portal, not a second checkout."),
  pausedRuns: z
    .array(
      z.object({
        runId: z.string(),
        limit: PauseLimit,
        message: z.string(),
        pausedAt: IsoTime,
        expiresAt: IsoTime.describe("Still paused then, the run fails."),
      }),
    )
    .describe("The user's runs paused at a limit now, oldest first (at most 20): one paused at the plan's ceiling or allowance resumes by itself once the user upgrades."),
});

export const CheckoutRequest = z.object({
  plan: Slug,
  returnUrl: z.string().url().max(2000).optional().describe("Where Stripe sends the browser back (http or https); default: the hosted billing page."),
});
export const CheckoutSession = z.object({
  id: z.string().describe("The Stripe Checkout Session id, `cs_...`."),
  url: z.string().describe("Send the browser here."),
});

export const PortalRequest = z.object({
  returnUrl: z
    .string()
    .url()
    .max(2000)
    .optional()
    .describe("Where the portal's way back leads (http or https), with `portal=return` added; default: the hosted billing page."),
});
export const PortalSession = z.object({
  url: z.string().describe("Send the browser here: Stripe's customer portal for this user, in the app's account."),
});

/** Stripe's webhook POST: any JSON, verified by the `Stripe-Signature` header against the raw body. */
export const StripeWebhookBody = z.record(z.unknown());
export const StripeWebhookAck = z.object({ received: z.literal(true), duplicate: z.boolean() });
