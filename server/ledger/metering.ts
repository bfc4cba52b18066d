import type { Prisma } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";

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
export async function entitlementOf(tx: Tx, tenant: Tenant, endUserId: string): Promise<Entitlement> {
  const sub = await tx.subscription.findFirst({
    where: { ...tenant, endUserId, status: { in: ["active", "trialing"] } },
    include: { plan: true },
    orderBy: { createdAt: "desc" },
  });
  const plan = sub?.plan ?? (await tx.plan.findFirst({ where: { ...tenant, isDefault: true, archivedAt: null } }));
  if (!plan) return UNLIMITED;
  return { planId: plan.id, unit: plan.allowanceUnit, allowance: plan.allowance, overage: plan.overage, spendCeilingMicros: plan.spendCeilingMicros };
}

/**
 * Refuses a run start (402) when the user's plan stops at its allowance and the
 * allowance of this period is used. Call it with the user's row locked, so
 * concurrent starts of one user are decided one after another and never overshoot.
 */
export async function checkAllowance(tx: Tx, tenant: Tenant, endUserId: string, period: string, e: Entitlement): Promise<void> {
  if (e.overage || e.allowance === null) return;
  const used = await tx.usageRow.aggregate({
    where: { ...tenant, endUserId, period, ...(e.unit === "runs" ? { kind: "run" } : {}) },
    _count: true,
    _sum: { inputTokens: true, outputTokens: true },
  });
  const consumed = e.unit === "runs" ? BigInt(used._count) : (used._sum.inputTokens ?? 0n) + (used._sum.outputTokens ?? 0n);
  if (consumed >= e.allowance) {
    throw new ApiError("allowance_exhausted", `The user's plan allows ${e.allowance} ${e.unit} this period and ${consumed} are used: nothing was run.`);
  }
}

/** Locks the user's row for the rest of the transaction: run starts of one user are counted one at a time. */
export async function lockUser(tx: Tx, endUserId: string): Promise<void> {
  await tx.$queryRaw`SELECT id FROM end_users WHERE id = ${endUserId} FOR UPDATE`;
}

/** The ledger row of a run start: written in the transaction that creates the run, once (its unique key). */
export async function countRun(tx: Tx, run: { id: string; endUserId: string; costClass: CostClassValue } & Tenant, period: string): Promise<void> {
  await tx.usageRow.create({
    data: { appId: run.appId, environment: run.environment, endUserId: run.endUserId, runId: run.id, costClass: run.costClass, kind: "run", period, uniqueKey: `run:${run.id}` },
  });
}
