import type { ThresholdMeasure } from "@svc/contract";
import type { Sql } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { periodOf } from "../ledger/metering.js";

/**
 * What a user met of their plan, recorded once each in `plan_signals` whether or not
 * an endpoint wants to hear it: an alert threshold reached, a run paused at a limit.
 * The dashboard counts the upgrades that followed them; the `allowance.threshold` and
 * `run.paused` webhooks are sent for the rows written here, under the same keys.
 */

/** A threshold newly reached: its percentage, and what it is a percentage of. */
export interface Crossed {
  threshold: number;
  measure: ThresholdMeasure;
  of: string | number | bigint;
  period: string;
  key: string;
}

/**
 * Records the plan's alert thresholds the user's usage has reached in the window now and
 * answers those reached for the first time (one statement; nothing is read for a plan
 * without an allowance or ceiling, or without thresholds). A threshold is a percentage of
 * the allowance in its unit, or, for a plan whose allowance is unlimited, of its spend ceiling.
 */
export async function recordThresholds(db: Sql, tenant: Tenant, endUserId: string, now: Date): Promise<Crossed[]> {
  return db.query<Crossed>(
    `WITH m AS (
       SELECT u.period, p.alert_thresholds AS t,
              CASE WHEN p.allowance IS NOT NULL THEN 'allowance' ELSE 'spend' END AS measure,
              CASE WHEN p.allowance IS NOT NULL THEN u.used ELSE u.amount_micros END AS used,
              COALESCE(p.allowance, p.spend_ceiling_micros) AS of
         FROM plans p CROSS JOIN LATERAL svc_user_usage($1, $2::"Environment", $3, $4) u
        WHERE p.id = svc_user_plan($1, $2::"Environment", $3)
          AND (p.allowance IS NOT NULL OR p.spend_ceiling_micros IS NOT NULL) AND cardinality(p.alert_thresholds) > 0)
     INSERT INTO plan_signals (id, app_id, environment, end_user_id, kind, period, threshold, measure, unique_key, at)
     SELECT 'sig_' || replace(gen_random_uuid()::text, '-', ''), $1, $2::"Environment", $3, 'threshold', m.period, x, m.measure,
            'threshold:' || $3 || ':' || m.period || ':' || m.measure || ':' || m.of || ':' || x, $5
       FROM m CROSS JOIN LATERAL unnest(m.t) AS x
      WHERE m.of > 0 AND m.used * 100 >= x::bigint * m.of
     ON CONFLICT (app_id, environment, unique_key) DO NOTHING
     RETURNING threshold, measure, period, unique_key AS key,
               (SELECT of FROM m) AS of`,
    [tenant.appId, tenant.environment, endUserId, periodOf(now), now],
  );
}

/** Records a run's pause (once per pause); true when this call wrote it. */
export async function recordPause(db: Sql, tenant: Tenant, p: { endUserId: string; runId: string; limit: string; period: string; pausedAt: string }): Promise<boolean> {
  const rows = await db.query<{ id: string }>(
    `INSERT INTO plan_signals (id, app_id, environment, end_user_id, kind, period, measure, run_id, unique_key, at)
     VALUES ('sig_' || replace(gen_random_uuid()::text, '-', ''), $1, $2::"Environment", $3, 'paused', $4, $5, $6, $7, $8)
     ON CONFLICT (app_id, environment, unique_key) DO NOTHING RETURNING id`,
    [tenant.appId, tenant.environment, p.endUserId, p.period, p.limit, p.runId, `paused:${p.runId}:${p.pausedAt}`, new Date(p.pausedAt)],
  );
  return rows.length > 0;
}
