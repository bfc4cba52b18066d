import type { z } from "zod";
import type { BillingOverview, CheckoutUnavailableReason, CheckoutRequest, CheckoutSession, Plan, PortalRequest, PortalSession, User } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { PublicUrls } from "../public-urls.js";
import type { SessionPrincipal } from "../sessions/sessions.js";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import type { Clock } from "../clock.js";
import type { StripeClients } from "./stripe-client.js";
import { httpUrl, StripeConnect, withQuery as withParams } from "./connect.js";
import { LIVE_SUBSCRIPTION_STATUSES } from "../ledger/functions.js";
import { pausedRunsOf } from "../runs/limits.js";

/** What a Checkout Session and the subscription it starts carry: who bought what, read back by the webhooks. */
export function checkoutMetadata(tenant: Tenant, user: string, plan: string): Record<string, string> {
  return { svc_app: tenant.appId, svc_environment: tenant.environment, svc_user: user, svc_plan: plan };
}

/** A subscription that entitles the user: the statuses the run start reads (their one TypeScript list, checked equal to the SQL's). */
const LIVE = LIVE_SUBSCRIPTION_STATUSES;
/** A subscription whose customer still has something to manage in the portal: a live one, or one whose payment failed (to fix the card). */
const MANAGEABLE = [...LIVE, "past_due", "unpaid"];

/** The ledger's reads the overview is made of (PlanService and the users' view). */
export interface BillingReads {
  plans: { list(tenant: Tenant): Promise<z.infer<typeof Plan>[]> };
  users: { view(tenant: Tenant, externalId: string): Promise<z.infer<typeof User>> };
}

/**
 * The app's Stripe account (one per environment) and checkout. A Checkout
 * Session is created in the app's connected account (`Stripe-Account`), tagged
 * with the user's id (`client_reference_id` and metadata on the session and on
 * the subscription it starts), so the payment, and the trial before it, belong
 * to that user. Entitlement comes later, from Stripe's signed webhooks
 * (stripe-events.ts), never from the browser coming back.
 */
export class BillingService {
  /** The app's Stripe account: attached through Stripe Connect only (connect.ts). */
  readonly connect: StripeConnect;

  constructor(
    private readonly db: Database,
    clock: Clock,
    private readonly urls: PublicUrls,
    private readonly stripe: StripeClients | null,
    private readonly logger: Logger,
    private readonly reads: BillingReads,
  ) {
    this.connect = new StripeConnect({ db, clock, urls, stripe, logger });
  }

  /** What the plans component renders: the plans on sale (and the default one), and where the session's user stands. */
  async overview(session: SessionPrincipal): Promise<z.infer<typeof BillingOverview>> {
    const tenant: Tenant = { appId: session.appId, environment: session.environment };
    const [plans, user, unavailable, manageable, pausedRuns] = await Promise.all([
      this.reads.plans.list(tenant),
      this.reads.users.view(tenant, session.user),
      this.checkoutUnavailable(tenant),
      this.manageableSubscription(tenant, session.endUserId),
      pausedRunsOf(this.db, tenant, session.endUserId),
    ]);
    return {
      user: session.user,
      plans,
      current: { plan: user.plan, subscription: user.subscription, allowance: user.allowance, usage: user.usage },
      checkoutAvailable: unavailable === null,
      checkoutUnavailableReason: unavailable?.reason ?? null,
      checkoutUnavailableMessage: unavailable?.message ?? null,
      portalAvailable: manageable !== null,
      pausedRuns,
    };
  }

  /** The hosted billing page, where checkout returns by default. */
  get billingPage(): string {
    return `${this.urls.base}/billing`;
  }

  /** The user's newest Stripe subscription the portal can manage: a live one first, else one with a failed payment (`withCustomer`: only those whose Stripe customer is known). */
  private async manageableSubscription(tenant: Tenant, endUserId: string, opts: { withCustomer?: boolean } = {}) {
    const subs = await this.db.prisma.subscription.findMany({
      where: { ...tenant, endUserId, source: "stripe", status: { in: MANAGEABLE }, ...(opts.withCustomer ? { stripeCustomerId: { not: null } } : {}) },
      orderBy: { createdAt: "desc" },
      include: { plan: { select: { name: true } } },
    });
    return subs.find((s) => LIVE.includes(s.status)) ?? subs[0] ?? null;
  }

  /** True once the platform's Stripe key and the app's account are there, and Stripe has not said the account cannot take charges. */
  async checkoutAvailable(tenant: Tenant): Promise<boolean> {
    return (await this.checkoutUnavailable(tenant)) === null;
  }

  /** Why checkout cannot start for this app now, in a code and in words for its end user; null when it can. */
  async checkoutUnavailable(tenant: Tenant): Promise<{ reason: z.infer<typeof CheckoutUnavailableReason>; message: string } | null> {
    if (this.stripe === null) return { reason: "stripe_not_configured", message: "Checkout is not available: payments are not set up on this service yet." };
    const account = await this.connect.chargeableAccount(tenant);
    if (account === null) return { reason: "account_not_connected", message: "Checkout is not available yet: the app has not connected its Stripe account." };
    if (account.chargesEnabled === false) {
      return { reason: "charges_not_enabled", message: "Checkout is not available yet: the app's Stripe account cannot take payments yet (its setup with Stripe is unfinished)." };
    }
    return null;
  }

  /**
   * A Checkout Session for the session's user and `plan`: the plan must be on
   * sale (not archived, with a Stripe price), the app's account connected and
   * the platform's Stripe key configured. Nothing is written here.
   */
  async checkout(session: SessionPrincipal, request: z.infer<typeof CheckoutRequest>): Promise<z.infer<typeof CheckoutSession>> {
    const returnUrl = request.returnUrl === undefined ? null : httpUrl(request.returnUrl);
    const tenant: Tenant = { appId: session.appId, environment: session.environment };
    const plan = await this.db.prisma.plan.findUnique({ where: { appId_environment_slug: { ...tenant, slug: request.plan } } });
    if (!plan) throw new ApiError("not_found", `No plan \`${request.plan}\`.`, { param: "plan" });
    if (plan.archivedAt) throw new ApiError("plan_unavailable", `The plan \`${plan.slug}\` is no longer sold.`);
    if (!plan.stripePriceId) throw new ApiError("plan_unavailable", `The plan \`${plan.slug}\` is not sold through checkout (it has no Stripe price).`);
    // One Stripe subscription per user: a second checkout would start a second subscription (and a second charge),
    // also while a failed payment waits to be fixed.
    const held = await this.manageableSubscription(tenant, session.endUserId);
    if (held) {
      throw new ApiError(
        "already_subscribed",
        LIVE.includes(held.status)
          ? `You are already subscribed to ${held.plan.name}. Change plans in the customer portal (POST /v1/billing/portal).`
          : `The payment for your ${held.plan.name} subscription failed: fix it in the customer portal (POST /v1/billing/portal) before choosing another plan.`,
      );
    }
    const connected = await this.connect.chargeableAccount(tenant);
    if (!connected) throw new ApiError("billing_not_connected", "Checkout is not available yet: the app has not connected its Stripe account.");
    if (connected.chargesEnabled === false) {
      throw new ApiError("billing_not_connected", "Checkout is not available yet: the app's Stripe account cannot take charges (its onboarding is unfinished or Stripe disabled charges).");
    }
    const account = connected.id;
    if (!this.stripe) throw new ApiError("not_configured", "Checkout is not available: this service's operator has not configured Stripe (STRIPE_SECRET_KEY); retrying will not help.");

    const metadata = checkoutMetadata(tenant, session.user, plan.slug);
    const back = (outcome: "success" | "cancel") => withQuery(returnUrl ?? this.billingPage, "checkout", outcome);
    try {
      const created = await this.stripe.api.checkout.sessions.create(
        {
          mode: "subscription",
          line_items: [{ price: plan.stripePriceId, quantity: 1 }],
          // Stripe takes at most 200 characters here; the metadata always carries the id.
          ...(session.user.length <= 200 ? { client_reference_id: session.user } : {}),
          metadata,
          subscription_data: { metadata, ...(plan.trialDays > 0 ? { trial_period_days: plan.trialDays } : {}) },
          success_url: back("success"),
          cancel_url: back("cancel"),
        },
        { stripeAccount: account },
      );
      if (!created.url) throw new ApiError("service_unavailable", "Stripe created the checkout without a page to send the browser to.");
      return { id: created.id, url: created.url };
    } catch (err) {
      throw stripeFailure(err, { code: "plan_unavailable", refused: `Stripe refused to start checkout of \`${plan.slug}\``, what: "a checkout session" }, this.logger);
    }
  }

  /**
   * A customer portal session for the session's user, in the app's connected
   * account: the customer of their Stripe subscription (the newest live one,
   * else one whose payment failed) changes plan, updates the card or cancels
   * there, and Stripe's events bring the change back. The user's subscription
   * is checked first, then the account, then the platform's key. Nothing is
   * written here.
   */
  async portal(session: SessionPrincipal, request: z.infer<typeof PortalRequest>): Promise<z.infer<typeof PortalSession>> {
    const returnUrl = request.returnUrl === undefined ? null : httpUrl(request.returnUrl);
    const tenant: Tenant = { appId: session.appId, environment: session.environment };
    const subscription = await this.manageableSubscription(tenant, session.endUserId, { withCustomer: true });
    if (!subscription?.stripeCustomerId) {
      throw new ApiError("no_subscription", "There is no Stripe subscription to manage: choose a plan to subscribe (POST /v1/billing/checkout).");
    }
    const account = await this.connect.accountId(tenant);
    if (!account) throw new ApiError("billing_not_connected", "The customer portal is not available: the app has not connected its Stripe account.");
    if (!this.stripe) throw new ApiError("not_configured", "The customer portal is not available: this service's operator has not configured Stripe (STRIPE_SECRET_KEY); retrying will not help.");
    try {
      const created = await this.stripe.api.billingPortal.sessions.create(
        { customer: subscription.stripeCustomerId, return_url: withQuery(returnUrl ?? this.billingPage, "portal", "return") },
        { stripeAccount: account },
      );
      return { url: created.url };
    } catch (err) {
      throw stripeFailure(err, { code: "portal_unavailable", refused: "Stripe refused to open the customer portal", what: "a portal session" }, this.logger);
    }
  }
}

function withQuery(base: string, name: string, value: string): string {
  return withParams(base, { [name]: value });
}

/**
 * Stripe's refusal in our envelope: a refused request (a wrong price, an
 * unusable account, a portal not configured) is a 409 saying why; anything
 * else, Stripe's availability.
 */
function stripeFailure(err: unknown, on: { code: "plan_unavailable" | "portal_unavailable"; refused: string; what: string }, logger: Logger): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { type?: string; code?: string; statusCode?: number; message?: string };
  logger.warn({ stripeError: { type: e.type, code: e.code, statusCode: e.statusCode } }, `Stripe refused ${on.what}`);
  if (e.type === "StripeInvalidRequestError" || e.type === "StripePermissionError") {
    return new ApiError(on.code, `${on.refused}: ${e.message ?? "invalid request"}`);
  }
  return new ApiError("service_unavailable", `Stripe could not be reached to create ${on.what}; try again in a moment.`);
}
