import { wakePausedRuns } from "../runs/limits.js";
import type { Database, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { Logger } from "../logger.js";
import type { WebhookFacts } from "../webhooks/facts.js";
import { ApiError } from "../errors.js";
import { verifyStripeEvent } from "./stripe-client.js";
import { applyStripeEvent, type PlanChange, type StripeEventLike } from "./entitlement.js";
import { statusOf } from "./connected-account.js";


/**
 * Stripe's webhook: the platform's Connect endpoint, receiving the events of
 * every connected account. Each event is verified against the raw body, then
 * recorded (its id is the primary key of `stripe_events`) in the same
 * transaction as the entitlement change it makes: a repeat delivery, even one
 * racing the first, changes nothing and answers `duplicate: true`.
 */
export class StripeWebhookService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly secret: string | null,
    private readonly facts: WebhookFacts,
    private readonly logger: Logger,
  ) {}

  async receive(rawBody: Buffer | undefined, signature: string | undefined): Promise<{ received: true; duplicate: boolean }> {
    const event = this.verify(rawBody, signature);
    const tenant = await this.tenantOf(event);
    if (!tenant) {
      // Not ours to apply (an account no app connected, an event without our metadata): acknowledged, or Stripe retries it for days.
      this.logger.info({ stripeEvent: event.id, type: event.type }, "Stripe event for no known app: acknowledged, nothing applied");
      return { received: true, duplicate: false };
    }
    const now = this.clock.now();
    const outcome = await this.db.prisma.$transaction(
      async (tx) => {
        const recorded = await tx.$executeRawUnsafe(
          `INSERT INTO stripe_events (id, app_id, environment, type, received_at) VALUES ($1, $2, $3::"Environment", $4, $5) ON CONFLICT (id) DO NOTHING`,
          event.id,
          tenant.appId,
          tenant.environment,
          event.type,
          now,
        );
        if (recorded === 0) return { duplicate: true, change: null };
        if (event.type === "account.updated" || event.type === "account.application.deauthorized") {
          await applyAccountEvent(tx, tenant, event as StripeEventLike & { account: string }, this.logger);
          return { duplicate: false, change: null };
        }
        return { duplicate: false, change: await applyStripeEvent(tx, tenant, event, now) };
      },
      { timeout: 15_000 },
    );
    if (outcome.change) {
      // An upgrade resumes the user's runs paused at the plan's ceiling or allowance.
      await wakePausedRuns(this.db, tenant, outcome.change.user);
      await this.report(tenant, event.id, outcome.change);
    }
    return { received: true, duplicate: outcome.duplicate };
  }

  private verify(rawBody: Buffer | undefined, signature: string | undefined): StripeEventLike & { account?: unknown; livemode?: unknown } {
    if (!this.secret) {
      throw new ApiError("invalid_signature", "No Stripe webhook signing secret is configured on this service (STRIPE_WEBHOOK_SECRET): no event can be verified, so none is accepted.");
    }
    if (!signature) throw new ApiError("invalid_signature", "The Stripe-Signature header is missing.");
    if (!rawBody || rawBody.length === 0) throw new ApiError("invalid_signature", "The event has no body to verify.");
    let event: StripeEventLike & { account?: unknown; livemode?: unknown };
    try {
      event = verifyStripeEvent(rawBody, signature, this.secret, this.clock.now().getTime()) as unknown as typeof event;
    } catch {
      throw new ApiError("invalid_signature", "The Stripe-Signature header does not verify this body with the configured secret (or it is older than 5 minutes).");
    }
    if (typeof event.id !== "string" || typeof event.type !== "string" || typeof event.created !== "number" || typeof event.data?.object !== "object") {
      throw new ApiError("invalid_request", "The event lacks an id, type, created time or data object.");
    }
    return event;
  }

  /**
   * Whose event it is: only the connected account it came from (Connect's
   * `account`) decides, in the environment its `livemode` says. Metadata never
   * does: any account connected to the platform can write metadata naming
   * another app, so trusting it would let one app's account grant plans in
   * another's. An event from an account no app has connected (or from the
   * platform itself, where nothing is ever sold) is nobody's.
   */
  private async tenantOf(event: { account?: unknown; livemode?: unknown }): Promise<Tenant | null> {
    if (typeof event.account !== "string") return null;
    const environment = event.livemode === true ? "live" : "test";
    const account = await this.db.prisma.billingAccount.findUnique({ where: { stripeAccountId_environment: { stripeAccountId: event.account, environment } } });
    return account ? { appId: account.appId, environment: account.environment } : null;
  }

  /** `plan.changed` to the app's endpoints; a failure there is logged and never fails Stripe's delivery (the row is already right). */
  private report(tenant: Tenant, eventId: string, change: PlanChange): Promise<void> {
    return this.facts.planChanged(
      tenant,
      change.user,
      { plan: change.plan, previousPlan: change.previousPlan, status: change.status, source: "stripe", subscription: change.subscription },
      `plan.changed:${eventId}`,
    );
  }
}


/**
 * The connected account itself: `account.updated` stores its state (charges,
 * onboarding, requirements) unless a newer one is stored; the platform's access
 * revoked by the account's owner (`account.application.deauthorized`) detaches
 * it from the app, unless it was connected again after the event.
 */
async function applyAccountEvent(tx: Tx, tenant: Tenant, event: StripeEventLike & { account: string }, logger: Logger): Promise<void> {
  const at = new Date(event.created * 1000);
  if (event.type === "account.updated") {
    const object = event.data.object;
    if (object.id !== undefined && object.id !== event.account) return;
    const status = statusOf(object);
    await tx.$executeRawUnsafe(
      `UPDATE billing_accounts SET charges_enabled = $4, details_submitted = $5, payouts_enabled = $6, requirements = $7::jsonb, checked_at = $8
       WHERE app_id = $1 AND environment = $2::"Environment" AND stripe_account_id = $3 AND (checked_at IS NULL OR checked_at <= $8)`,
      tenant.appId,
      tenant.environment,
      event.account,
      status.chargesEnabled,
      status.detailsSubmitted,
      status.payoutsEnabled,
      status.requirements ? JSON.stringify(status.requirements) : null,
      at,
    );
    return;
  }
  const detached = await tx.$executeRawUnsafe(
    `DELETE FROM billing_accounts WHERE app_id = $1 AND environment = $2::"Environment" AND stripe_account_id = $3 AND connected_at <= $4`,
    tenant.appId,
    tenant.environment,
    event.account,
    at,
  );
  if (detached > 0) logger.info({ app: tenant.appId, environment: tenant.environment, stripeAccount: event.account }, "Stripe account detached: its owner revoked the platform's access");
}
