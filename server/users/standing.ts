import type { Standing } from "@svc/contract";
import type { Sql } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { periodOf } from "../ledger/metering.js";
import { micros } from "../ledger/money.js";
import { userPlanSql, userUsage, type UserUsage } from "../ledger/functions.js";

/** The UTC window a period names: a month (`2026-11`) or a year (`2026`), and when the next one begins. */
export function windowOf(period: string): { start: Date; resetsAt: Date } {
  const [year, month] = period.split("-").map(Number);
  if (month === undefined) return { start: new Date(Date.UTC(year, 0, 1)), resetsAt: new Date(Date.UTC(year + 1, 0, 1)) };
  return { start: new Date(Date.UTC(year, month - 1, 1)), resetsAt: new Date(Date.UTC(year, month, 1)) };
}

/** The plan's numbers a standing needs (null: no plan, so no limit and no ceiling). */
export interface StandingPlan {
  allowance: string | number | bigint | null;
  spend_ceiling_micros: string | number | bigint | null;
}

/** Where a user stands: their plan's allowance and ceiling against the window's ledger sums (`svc_user_usage`, as the run start counts). */
export function standingOf(plan: StandingPlan | null, sum: UserUsage): Standing {
  const limit = plan && plan.allowance !== null ? micros(plan.allowance) : null;
  const used = micros(sum.used);
  const ceiling = plan && plan.spend_ceiling_micros !== null ? micros(plan.spend_ceiling_micros) : null;
  const spent = micros(sum.amount_micros);
  const window = windowOf(sum.period);
  return {
    unit: sum.unit,
    limit,
    used,
    remaining: limit === null ? null : Math.max(0, limit - used),
    reached: limit !== null && used >= limit,
    period: sum.period,
    windowStart: window.start.toISOString(),
    resetsAt: window.resetsAt.toISOString(),
    spend: { usedMicros: spent, ceilingMicros: ceiling, remainingMicros: ceiling === null ? null : Math.max(0, ceiling - spent), reached: ceiling !== null && spent >= ceiling },
  };
}

/** A user's standing now, read in two statements: what a 402 carries. */
export async function userStanding(db: Sql, tenant: Tenant, endUserId: string, now: Date): Promise<Standing> {
  const user = { app: "$1", environment: `$2::"Environment"`, user: "$3" };
  const [plans, sum] = await Promise.all([
    db.query<StandingPlan>(`SELECT p.allowance, p.spend_ceiling_micros FROM plans p WHERE p.id = ${userPlanSql(user)}`, [tenant.appId, tenant.environment, endUserId]),
    userUsage(db, { appId: tenant.appId, environment: tenant.environment, endUserId, period: periodOf(now) }),
  ]);
  return standingOf(plans[0] ?? null, sum);
}
