import type { Prisma, Sql } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";

/**
 * The ledger's part of a run start: the user's plan, its allowance check and the
 * run's count, in plain SQL inside the start's transaction (this is on every
 * run's path; each statement is one round trip).
 */

/** A Prisma transaction client (inside `$transaction`). */
export type Tx = Parameters<Parameters<Prisma["$transaction"]>[0]>[0];

export type CostClassValue = "user_hardware" | "user_subscription" | "app_served" | "free";

/** The plan period a moment falls in: calendar months (UTC) until plans set their own periods. */
export function periodOf(at: Date): string {
  return at.toISOString().slice(0, 7);
}

/** What a user's plan allows: the part a run start has to check. */
export interface Entitlement {
  planId: string | null;
  unit: "runs" | "tokens";
  /** Null: unlimited. */
  allowance: bigint | null;
  /** True: usage goes on past the allowance (as overage). */
  overage: boolean;
  spendCeilingMicros: bigint | null;
}

const UNLIMITED: Entitlement = { planId: null, unit: "runs", allowance: null, overage: true, spendCeilingMicros: null };

/**
 * The user's plan: their live subscription's, else the app's default plan, else
 * unlimited (an app that configured no plan meters without stopping anyone).
 */
export async function entitlementOf(sql: Sql, tenant: Tenant, endUserId: string): Promise<Entitlement> {
  const rows = await sql.query<{ id: string; allowance_unit: "runs" | "tokens"; allowance: string | bigint | null; overage: boolean; spend_ceiling_micros: string | bigint | null }>(
    `SELECT p.id, p.allowance_unit, p.allowance, p.overage, p.spend_ceiling_micros FROM plans p
      WHERE p.id = COALESCE(
        (SELECT s.plan_id FROM subscriptions s
          WHERE s.app_id = $1 AND s.environment = $2::"Environment" AND s.end_user_id = $3 AND s.status IN ('active', 'trialing')
          ORDER BY s.created_at DESC LIMIT 1),
        (SELECT d.id FROM plans d WHERE d.app_id = $1 AND d.environment = $2::"Environment" AND d.is_default AND d.archived_at IS NULL ORDER BY d.created_at LIMIT 1))`,
    [tenant.appId, tenant.environment, endUserId],
  );
  const plan = rows[0];
  if (!plan) return UNLIMITED;
  const big = (v: string | bigint | null) => (v === null ? null : BigInt(v));
  return { planId: plan.id, unit: plan.allowance_unit, allowance: big(plan.allowance), overage: plan.overage, spendCeilingMicros: big(plan.spend_ceiling_micros) };
}

/**
 * Refuses a run start (402) when the user's plan stops at its allowance and the
 * allowance of this period is used. Call it with the user's row locked, so
 * concurrent starts of one user are decided one after another and never overshoot.
 */
export async function checkAllowance(sql: Sql, tenant: Tenant, endUserId: string, period: string, e: Entitlement): Promise<void> {
  if (e.overage || e.allowance === null) return;
  const [used] = await sql.query<{ consumed: string }>(
    e.unit === "runs"
      ? `SELECT count(*)::text AS consumed FROM usage_rows WHERE app_id = $1 AND environment = $2::"Environment" AND end_user_id = $3 AND period = $4 AND kind = 'run'`
      : `SELECT COALESCE(sum(input_tokens + output_tokens), 0)::text AS consumed FROM usage_rows WHERE app_id = $1 AND environment = $2::"Environment" AND end_user_id = $3 AND period = $4`,
    [tenant.appId, tenant.environment, endUserId, period],
  );
  const consumed = BigInt(used.consumed);
  if (consumed >= e.allowance) {
    throw new ApiError("allowance_exhausted", `The user's plan allows ${e.allowance} ${e.unit} this period and ${consumed} are used: nothing was run.`);
  }
}

/** Locks the user's row for the rest of the transaction: run starts of one user are counted one at a time. */
export async function lockUser(sql: Sql, endUserId: string): Promise<void> {
  await sql.query(`SELECT id FROM end_users WHERE id = $1 FOR UPDATE`, [endUserId]);
}
