import type { z } from "zod";
import type { Conversions, UpgradeSignalKind } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { DayRange } from "../ledger/usage-summary.js";
import { micros } from "../ledger/money.js";

/** Payments one read lists at most (newest first). */
export const MAX_PAYMENTS = 500;

type Counts = { trials: string | number; converted: string | number; cancelled: string | number };

/**
 * Trials and what became of them, from the Stripe subscriptions' history
 * (`subscription_changes`, written as Stripe's events apply), by when Stripe says
 * each change happened (UTC days):
 * - a trial started: a subscription entered `trialing`;
 * - converted: a subscription went from `trialing` to `active` (its trial ended and was paid for);
 * - cancelled: a subscription entered `canceled` (trial or paid).
 * Payments: the paid invoices of the range, each with its user, plan, and the
 * trial of its subscription (when it had one).
 */
export async function conversions(db: Database, tenant: Tenant, range: DayRange): Promise<z.infer<typeof Conversions>> {
  const params = [tenant.appId, tenant.environment, range.start, range.end];
  const where = `c.app_id = $1 AND c.environment = $2::"Environment" AND c.at >= $3 AND c.at < $4`;
  const counts = `count(*) FILTER (WHERE c.to_status = 'trialing' AND c.from_status IS DISTINCT FROM 'trialing') AS trials,
    count(*) FILTER (WHERE c.from_status = 'trialing' AND c.to_status = 'active') AS converted,
    count(*) FILTER (WHERE c.to_status = 'canceled' AND c.from_status IS DISTINCT FROM 'canceled') AS cancelled`;
  const [perPlan, series, payments] = await Promise.all([
    db.query<Counts & { slug: string; name: string }>(
      `SELECT p.slug, p.name, ${counts} FROM subscription_changes c JOIN plans p ON p.id = c.plan_id
        WHERE ${where} GROUP BY p.slug, p.name ORDER BY p.slug`,
      params,
    ),
    db.query<Counts & { day: string }>(
      `SELECT to_char(c.at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, ${counts} FROM subscription_changes c
        WHERE ${where} GROUP BY 1 ORDER BY 1`,
      params,
    ),
    db.query<{ id: string; external_id: string; slug: string | null; amount_micros: string | number; currency: string; paid_at: Date | string; trial_started_at: Date | string | null }>(
      `SELECT y.id, e.external_id, p.slug, y.amount_micros, y.currency, y.paid_at,
              (SELECT min(c.at) FROM subscription_changes c WHERE c.subscription_id = y.subscription_id AND c.to_status = 'trialing') AS trial_started_at
         FROM payments y JOIN end_users e ON e.id = y.end_user_id LEFT JOIN plans p ON p.id = y.plan_id
        WHERE y.app_id = $1 AND y.environment = $2::"Environment" AND y.paid_at >= $3 AND y.paid_at < $4
        ORDER BY y.paid_at DESC, y.id DESC LIMIT ${MAX_PAYMENTS}`,
      params,
    ),
  ]);
  const signals = await planSignals(db, params);
  const view = (r: Counts) => ({ trialsStarted: micros(r.trials), converted: micros(r.converted), cancelled: micros(r.cancelled) });
  return {
    from: range.from,
    to: range.to,
    perPlan: perPlan.map((r) => ({ plan: { slug: r.slug, name: r.name }, ...view(r) })),
    series: series.map((r) => ({ day: r.day, ...view(r) })),
    payments: payments.map((r) => ({
      id: r.id,
      user: r.external_id,
      plan: r.slug,
      amountMicros: micros(r.amount_micros),
      currency: r.currency,
      paidAt: new Date(r.paid_at).toISOString(),
      trialStartedAt: r.trial_started_at === null ? null : new Date(r.trial_started_at).toISOString(),
    })),
    signals,
  };
}

/** How long after a signal a new plan counts as following it. */
const UPGRADE_WINDOW = "7 days";
/** Signals one read lists at most (newest first). */
export const MAX_SIGNALS = 100;

/**
 * The plan signals of the range (`plan_signals`: runs paused at a limit, alert thresholds reached)
 * and, for each, the first subscription the user got within 7 days after it (bought through
 * checkout or set by the app).
 */
async function planSignals(db: Database, params: unknown[]): Promise<z.infer<typeof Conversions>["signals"]> {
  const from = `FROM plan_signals s JOIN end_users e ON e.id = s.end_user_id
    LEFT JOIN LATERAL (SELECT sub.created_at, sub.plan_id FROM subscriptions sub
                        WHERE sub.app_id = s.app_id AND sub.environment = s.environment AND sub.end_user_id = s.end_user_id
                          AND sub.created_at >= s.at AND sub.created_at < s.at + interval '${UPGRADE_WINDOW}'
                        ORDER BY sub.created_at LIMIT 1) u ON true`;
  const where = `WHERE s.app_id = $1 AND s.environment = $2::"Environment" AND s.at >= $3 AND s.at < $4`;
  const [[totals], recent] = await Promise.all([
    db.query<{ pauses: string | number; thresholds: string | number; upgraded: string | number }>(
      `SELECT count(*) FILTER (WHERE s.kind = 'paused') AS pauses, count(*) FILTER (WHERE s.kind = 'threshold') AS thresholds,
              count(DISTINCT s.end_user_id) FILTER (WHERE u.created_at IS NOT NULL) AS upgraded ${from} ${where}`,
      params,
    ),
    db.query<{ at: Date | string; external_id: string; kind: UpgradeSignalKind; measure: string; threshold: number | null; run_id: string | null; upgraded_at: Date | string | null; slug: string | null }>(
      `SELECT s.at, e.external_id, s.kind, s.measure, s.threshold, s.run_id, u.created_at AS upgraded_at, p.slug
         ${from} LEFT JOIN plans p ON p.id = u.plan_id ${where}
        ORDER BY s.at DESC, s.id DESC LIMIT ${MAX_SIGNALS}`,
      params,
    ),
  ]);
  return {
    pauses: micros(totals.pauses),
    thresholds: micros(totals.thresholds),
    upgraded: micros(totals.upgraded),
    recent: recent.map((r) => ({
      at: new Date(r.at).toISOString(),
      user: r.external_id,
      kind: r.kind,
      detail: r.kind === "threshold" ? `${r.threshold}% of ${r.measure}` : r.measure,
      runId: r.run_id,
      upgradedTo: r.slug,
      upgradedAt: r.upgraded_at === null ? null : new Date(r.upgraded_at).toISOString(),
    })),
  };
}
