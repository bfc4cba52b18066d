import type { Tenant } from "../keys/keys.js";
import type { Tx } from "../db/open.js";
import { ensureEndUser } from "../users/end-users.js";
import { randomId } from "../crypto.js";
import { userPlanSql } from "../ledger/functions.js";

/**
 * What Stripe's events do to a user's entitlement, inside the transaction that
 * records the event (stripe-events.ts). A user is entitled to the plan of their
 * newest live (LIVE_SUBSCRIPTION_STATUSES, ledger/functions.ts) subscription, the one the run start's SQL
 * function reads, so a change here changes the allowance at once.
 *
 * Events arrive in any order and more than once (deduplicated before this).
 * Rows are keyed by the Stripe subscription id; a subscription event applies
 * only if it is at least as new as the last one applied (`lastEventAt`), and a
 * deleted subscription stays canceled. `checkout.session.completed` only links
 * the session and customer to the row (or creates it with a first status when
 * it comes first); it never overrides a status a subscription event set.
 */

/** The parts of a Stripe event we read (the payload is checked field by field: it is input). */
export interface StripeEventLike {
  id: string;
  type: string;
  created: number;
  data: { object: Record<string, unknown> };
}

/** A user's plan or subscription status changed: reported to the app as `plan.changed`. */
export interface PlanChange {
  user: string;
  plan: string | null;
  previousPlan: string | null;
  status: string;
  subscription: string;
}

/** Stripe never brings a subscription back from these. */
const ENDED = ["canceled", "incomplete_expired"];

export async function applyStripeEvent(tx: Tx, tenant: Tenant, event: StripeEventLike, now: Date): Promise<PlanChange | null> {
  const object = event.data?.object ?? {};
  switch (event.type) {
    case "checkout.session.completed":
      return checkoutCompleted(tx, tenant, object, event, now);
    case "customer.subscription.created":
    case "customer.subscription.updated":
    case "customer.subscription.deleted":
      return subscriptionChanged(tx, tenant, object, event, now);
    case "invoice.paid":
    case "invoice.payment_succeeded":
      await recordPayment(tx, tenant, object, event, now);
      return null;
    default:
      return null;
  }
}

async function checkoutCompleted(tx: Tx, tenant: Tenant, session: Record<string, unknown>, event: StripeEventLike, now: Date): Promise<PlanChange | null> {
  const subscriptionId = idOf(session.subscription);
  if (session.mode !== "subscription" || !subscriptionId) return null;
  const meta = metadataOf(session);
  const user = meta.svc_user ?? str(session.client_reference_id);
  const customer = idOf(session.customer);
  const sessionId = str(session.id);
  await lockSubscription(tx, subscriptionId);
  const existing = await tx.subscription.findUnique({ where: { stripeSubscriptionId: subscriptionId } });
  if (existing) {
    if (existing.appId !== tenant.appId || existing.environment !== tenant.environment) return null;
    // A subscription event came first: fill in the ids, never touch the status it set.
    await tx.subscription.update({
      where: { id: existing.id },
      data: { stripeCheckoutSessionId: existing.stripeCheckoutSessionId ?? sessionId, stripeCustomerId: existing.stripeCustomerId ?? customer, updatedAt: now },
    });
    return null;
  }
  if (!user || !meta.svc_plan) return null;
  const plan = await tx.plan.findUnique({ where: { appId_environment_slug: { ...tenant, slug: meta.svc_plan } } });
  if (!plan) return null;
  const endUserId = await ensureEndUser(tx, tenant, user);
  const before = await entitledPlan(tx, tenant, endUserId);
  // The first status until the subscription's own events say more: paid, or a trial that needed no payment.
  const status = session.payment_status === "paid" ? "active" : session.payment_status === "no_payment_required" && plan.trialDays > 0 ? "trialing" : "incomplete";
  const started = new Date(event.created * 1000);
  const id = randomId("sub_", 20);
  await tx.subscription.create({
    data: {
      id,
      ...tenant,
      endUserId,
      planId: plan.id,
      status,
      source: "stripe",
      stripeCustomerId: customer,
      stripeSubscriptionId: subscriptionId,
      stripeCheckoutSessionId: sessionId,
      // No subscription event applied yet: the first one, whatever its time, sets the real state.
      lastEventAt: null,
      trialEndsAt: status === "trialing" ? new Date(started.getTime() + plan.trialDays * 86_400_000) : null,
      currentPeriodStart: started,
      createdAt: now,
      updatedAt: now,
    },
  });
  await recordChange(tx, tenant, { id, endUserId, planId: plan.id }, null, status, started, now);
  return changeOf(user, before, await entitledPlan(tx, tenant, endUserId), status, subscriptionId);
}

async function subscriptionChanged(tx: Tx, tenant: Tenant, sub: Record<string, unknown>, event: StripeEventLike, now: Date): Promise<PlanChange | null> {
  const subscriptionId = str(sub.id);
  if (!subscriptionId) return null;
  const deleted = event.type === "customer.subscription.deleted";
  const status = deleted ? "canceled" : str(sub.status);
  if (!status) return null;
  const eventAt = new Date(event.created * 1000);
  const meta = metadataOf(sub);
  await lockSubscription(tx, subscriptionId);
  const existing = await tx.subscription.findUnique({ where: { stripeSubscriptionId: subscriptionId } });
  if (existing && (existing.appId !== tenant.appId || existing.environment !== tenant.environment)) return null;
  // Older than what the row already reflects, or about a subscription already ended: nothing to do.
  if (existing?.lastEventAt && eventAt < existing.lastEventAt) return null;
  if (existing?.lastEventAt && ENDED.includes(existing.status)) return null;

  const plan = await planOf(tx, tenant, meta.svc_plan, priceOf(sub));
  const item = firstItem(sub);
  const fields = {
    status,
    trialEndsAt: time(sub.trial_end),
    currentPeriodStart: time(item?.current_period_start) ?? time(sub.current_period_start) ?? time(sub.start_date) ?? eventAt,
    currentPeriodEnd: time(item?.current_period_end) ?? time(sub.current_period_end),
    canceledAt: status === "canceled" ? (time(sub.ended_at) ?? time(sub.canceled_at) ?? eventAt) : null,
    lastEventAt: eventAt,
    updatedAt: now,
  };
  const customer = idOf(sub.customer);

  if (existing) {
    const user = await tx.endUser.findUniqueOrThrow({ where: { id: existing.endUserId } });
    const before = await entitledPlan(tx, tenant, existing.endUserId);
    await tx.subscription.update({
      where: { id: existing.id },
      data: { ...fields, planId: plan?.id ?? existing.planId, stripeCustomerId: existing.stripeCustomerId ?? customer },
    });
    if (existing.status !== status) await recordChange(tx, tenant, { id: existing.id, endUserId: existing.endUserId, planId: plan?.id ?? existing.planId }, existing.status, status, eventAt, now);
    if (existing.status === status && (plan?.id ?? existing.planId) === existing.planId) return null;
    return changeOf(user.externalId, before, await entitledPlan(tx, tenant, existing.endUserId), status, subscriptionId);
  }
  // First word of this subscription (its checkout's event may come later): the metadata says whose it is.
  const user = meta.svc_user;
  if (!user || !plan) return null;
  const endUserId = await ensureEndUser(tx, tenant, user);
  const before = await entitledPlan(tx, tenant, endUserId);
  const id = randomId("sub_", 20);
  await tx.subscription.create({
    data: { id, ...tenant, endUserId, planId: plan.id, source: "stripe", stripeCustomerId: customer, stripeSubscriptionId: subscriptionId, createdAt: now, ...fields },
  });
  await recordChange(tx, tenant, { id, endUserId, planId: plan.id }, null, status, eventAt, now);
  return changeOf(user, before, await entitledPlan(tx, tenant, endUserId), status, subscriptionId);
}

/** A subscription's status history, for the dashboard's conversions: written with the change itself. */
async function recordChange(tx: Tx, tenant: Tenant, sub: { id: string; endUserId: string; planId: string }, from: string | null, to: string, at: Date, now: Date): Promise<void> {
  await tx.subscriptionChange.create({
    data: { id: randomId("sch_", 20), ...tenant, subscriptionId: sub.id, endUserId: sub.endUserId, planId: sub.planId, fromStatus: from, toStatus: to, at, createdAt: now },
  });
}

/**
 * A paid invoice, recorded once per invoice (Stripe sends both `invoice.paid`
 * and `invoice.payment_succeeded` for one payment, each possibly more than once),
 * linked to the user through its subscription (else its customer). An invoice
 * of nothing (a trial's first, $0) is no payment; one no user of ours is known
 * for is not recorded.
 */
async function recordPayment(tx: Tx, tenant: Tenant, invoice: Record<string, unknown>, event: StripeEventLike, now: Date): Promise<void> {
  const invoiceId = str(invoice.id);
  const amount = typeof invoice.amount_paid === "number" && Number.isSafeInteger(invoice.amount_paid) ? invoice.amount_paid : null;
  const currency = str(invoice.currency)?.toLowerCase() ?? null;
  if (!invoiceId || amount === null || amount <= 0 || !currency) return;
  const parent = invoice.parent as { subscription_details?: { subscription?: unknown } } | null | undefined;
  // API 2025-03 and later name the subscription under `parent`; earlier versions at the top.
  const subscriptionId = idOf(parent?.subscription_details?.subscription) ?? idOf(invoice.subscription);
  const customer = idOf(invoice.customer);
  const sub =
    (subscriptionId ? await tx.subscription.findFirst({ where: { ...tenant, stripeSubscriptionId: subscriptionId } }) : null) ??
    (customer ? await tx.subscription.findFirst({ where: { ...tenant, stripeCustomerId: customer }, orderBy: { createdAt: "desc" } }) : null);
  if (!sub) return;
  const transitions = invoice.status_transitions as { paid_at?: unknown } | undefined;
  await tx.$executeRawUnsafe(
    `INSERT INTO payments (id, app_id, environment, end_user_id, subscription_id, plan_id, stripe_invoice_id, amount_micros, currency, paid_at, created_at)
     VALUES ($1, $2, $3::"Environment", $4, $5, $6, $7, $8, $9, $10, $11)
     ON CONFLICT (app_id, environment, stripe_invoice_id) DO NOTHING`,
    randomId("pay_", 20), tenant.appId, tenant.environment, sub.endUserId, sub.id, sub.planId, invoiceId, minorToMicros(amount, currency), currency,
    time(transitions?.paid_at) ?? new Date(event.created * 1000), now,
  );
}

/** Stripe's currencies without minor units, and those with three decimals (its amounts are in the smallest unit). */
const ZERO_DECIMAL = new Set(["bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"]);
const THREE_DECIMAL = new Set(["bhd", "jod", "kwd", "omr", "tnd"]);

/** An amount in Stripe's smallest unit of `currency`, in micros (millionths of the currency's unit). */
export function minorToMicros(amount: number, currency: string): bigint {
  const per = ZERO_DECIMAL.has(currency) ? 1_000_000n : THREE_DECIMAL.has(currency) ? 1_000n : 10_000n;
  return BigInt(amount) * per;
}

/** The slug of the plan the user is entitled to: their live subscription's (Stripe's first), else the default plan; null: none. */
export async function entitledPlan(tx: Tx, tenant: Tenant, endUserId: string): Promise<string | null> {
  const rows = await tx.$queryRawUnsafe<{ slug: string }[]>(
    `SELECT p.slug FROM plans p WHERE p.id = ${userPlanSql({ app: "$1::text", environment: `$2::"Environment"`, user: "$3::text" })}`,
    tenant.appId,
    tenant.environment,
    endUserId,
  );
  return rows[0]?.slug ?? null;
}

function changeOf(user: string, previousPlan: string | null, plan: string | null, status: string, subscription: string): PlanChange {
  return { user, plan, previousPlan, status, subscription };
}

/** Two events about one subscription (its checkout's and its own) apply one after the other. */
async function lockSubscription(tx: Tx, subscriptionId: string): Promise<void> {
  await tx.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(hashtext($1))`, `stripe-subscription:${subscriptionId}`);
}

/**
 * The plan a subscription is for: the plan selling its price first (a change
 * made in the customer portal changes the price, never the metadata written at
 * checkout), else the plan its metadata names.
 */
async function planOf(tx: Tx, tenant: Tenant, slug: string | undefined, priceId: string | null) {
  if (priceId) {
    const plan = await tx.plan.findFirst({ where: { ...tenant, stripePriceId: priceId }, orderBy: [{ archivedAt: { sort: "desc", nulls: "first" } }, { createdAt: "desc" }] });
    if (plan) return plan;
  }
  return slug ? tx.plan.findUnique({ where: { appId_environment_slug: { ...tenant, slug } } }) : null;
}

function firstItem(sub: Record<string, unknown>): Record<string, unknown> | null {
  const items = sub.items as { data?: unknown } | undefined;
  const first = Array.isArray(items?.data) ? items.data[0] : null;
  return first && typeof first === "object" ? (first as Record<string, unknown>) : null;
}

function priceOf(sub: Record<string, unknown>): string | null {
  const price = firstItem(sub)?.price ?? (sub.plan as unknown);
  return idOf(price);
}

function metadataOf(object: Record<string, unknown>): Record<string, string | undefined> {
  const m = object.metadata;
  if (!m || typeof m !== "object") return {};
  return Object.fromEntries(Object.entries(m as Record<string, unknown>).filter(([, v]) => typeof v === "string" && v !== "")) as Record<string, string>;
}

/** An id, whether Stripe sent it bare or as an expanded object. */
function idOf(value: unknown): string | null {
  if (typeof value === "string" && value !== "") return value;
  if (value && typeof value === "object" && typeof (value as { id?: unknown }).id === "string") return (value as { id: string }).id;
  return null;
}

function str(value: unknown): string | null {
  return typeof value === "string" && value !== "" ? value : null;
}

/** Stripe's Unix seconds as a Date; null when absent. */
function time(value: unknown): Date | null {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? new Date(value * 1000) : null;
}
