import type { Prisma } from "../db/open.js";

/**
 * The ledger's common terms. A run's start (its plan, its allowance, its count)
 * is decided in one SQL call, `svc_start_run` (migration 20261122184500), which
 * `RunService.begin` makes.
 */

/** A Prisma transaction client (inside `$transaction`). */
export type Tx = Parameters<Parameters<Prisma["$transaction"]>[0]>[0];

export type CostClassValue = "user_hardware" | "user_subscription" | "app_served" | "free";

/** The plan period a moment falls in: calendar months (UTC) until plans set their own periods. */
export function periodOf(at: Date): string {
  return at.toISOString().slice(0, 7);
}
