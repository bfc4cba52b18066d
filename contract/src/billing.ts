import { z } from "zod";
import { AllowanceUnit, Plan, PlanPeriod, User } from "./reads.js";
import { Environment, Micros, UserId } from "./common.js";

/**
 * Plans the app configures (app key, or `svc plans ...`), the Stripe account it
 * connects, and what the end user's browser does with them (the plans and
 * checkout components and the hosted `/billing` page, with an `est_` session).
 */

const Slug = z.string().min(1).max(64).regex(/^[a-z0-9][a-z0-9_-]*$/, "lowercase letters, digits, - and _");

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
  trialDays: z.number().int().min(0).max(730).optional(),
  isDefault: z.boolean().optional(),
});
export type PlanUpdate = z.infer<typeof PlanUpdate>;

export const PlanSlugParam = z.object({ slug: Slug });

export const AssignPlanRequest = z.object({
  plan: Slug.nullable().describe("The plan's slug; null puts the user back on the default plan."),
});

export const BillingAccountRequest = z.object({
  stripeAccountId: z.string().regex(/^acct_[A-Za-z0-9]+$/, "a Stripe account id, acct_..."),
});
export const BillingAccount = z.object({
  environment: Environment,
  stripeAccountId: z.string().nullable(),
  webhookUrl: z.string().describe("Where Stripe must send this account's events (a Connect webhook of the platform)."),
});

/** What the plans and checkout components render for the session's user. */
export const BillingOverview = z.object({
  user: UserId,
  plans: z.array(Plan),
  current: User.pick({ plan: true, subscription: true, allowance: true, usage: true }),
  checkoutAvailable: z.boolean().describe("False until the app connects a Stripe account."),
  portalAvailable: z
    .boolean()
    .describe("The user has a Stripe subscription to manage (live, or with a failed payment to fix): plan changes go through the customer portal, not a second checkout."),
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
