import type { PauseLimit, RunBudgetStanding, Standing } from "@svc/contract";
import type { z } from "zod";
import type { Sql } from "../db/open.js";
import type { UserUsage } from "../ledger/functions.js";
import type { Tenant } from "../keys/keys.js";
import { standingOf } from "../users/standing.js";
import { RUN_INPUT_CHANNEL } from "./store.js";

/**
 * The limits a run is held to between its turns, and what pauses it: the plan's
 * spend ceiling, a tokens plan that stops at its allowance, the run's own budget.
 * Read in one statement (the user's window as the run start counts it, the plan as
 * it is now, what the run's own ledger rows amount to, its budget as last raised),
 * so an upgrade, a new window or a raised budget is seen at the next look.
 */

export type Limit = z.infer<typeof PauseLimit>;
export type BudgetStanding = z.infer<typeof RunBudgetStanding>;
export type Budget = { maxMicros?: string; maxTokens?: number };

/** What one look at a run's limits reads. */
export interface LimitsRead extends UserUsage {
  allowance: string | number | bigint | null;
  overage: boolean | null;
  overage_price_micros: string | number | bigint | null;
  spend_ceiling_micros: string | number | bigint | null;
  has_plan: boolean;
  run_micros: string | number | bigint;
  run_tokens: string | number | bigint;
  runtime_kind: string | null;
  route_kind: string | null;
  budget: Budget | null;
}

/** One statement: the run's user's window and plan now, the run's own ledger sums and its budget. */
export async function readLimits(db: Sql, runId: string, period: string): Promise<LimitsRead | null> {
  const rows = await db.query<LimitsRead>(
    `SELECT u.*, p.id IS NOT NULL AS has_plan, p.allowance, p.overage, p.overage_price_micros, p.spend_ceiling_micros,
            rm.micros AS run_micros, rm.tokens AS run_tokens, r.request->>'runtimeKind' AS runtime_kind, r.route_kind,
            COALESCE(r.budget, r.request->'budget') AS budget
       FROM runs r
       CROSS JOIN LATERAL svc_user_usage(r.app_id, r.environment, r.end_user_id, $2) u
       LEFT JOIN plans p ON p.id = svc_user_plan(r.app_id, r.environment, r.end_user_id)
       CROSS JOIN LATERAL (SELECT COALESCE(sum(x.amount_micros), 0)::bigint AS micros,
                                  COALESCE(sum(x.input_tokens + x.output_tokens + x.cache_read_tokens + x.cache_write_tokens), 0)::bigint AS tokens
                             FROM usage_rows x WHERE x.run_id = r.id) rm
      WHERE r.id = $1`,
    [runId, period],
    { prepared: true },
  );
  return rows[0] ?? null;
}

/** Why a budget as given may never be reached (nothing is charged for the run), or null. */
export function budgetNote(budget: Budget, read: Pick<LimitsRead, "has_plan" | "overage" | "overage_price_micros" | "runtime_kind" | "route_kind">): string | null {
  if (read.route_kind === "service") {
    return budget.maxMicros !== undefined ? "A run on svc/echo is free: maxMicros is never reached; maxTokens counts its tokens." : null;
  }
  if (read.route_kind === "app") return "The app serves this run itself (route `app`): the service runs no turn of it, so its budget is never checked.";
  if (read.runtime_kind === "agent") return "An agent CLI runs its own loop on the user's machine: the service has no turn of it to pause at, so this budget is not enforced; cap the run with limits.runTimeoutMs.";
  const priced = read.has_plan && read.overage === true && read.overage_price_micros !== null && BigInt(read.overage_price_micros) > 0n;
  if (budget.maxMicros !== undefined && !priced) {
    return "maxMicros counts what the run's ledger rows are charged (the plan's overage prices); the user's plan charges nothing for usage, so it is never reached: cap the run with maxTokens.";
  }
  return null;
}

/** The run's budget against what it used. */
export function budgetStanding(budget: Budget | null, read: LimitsRead): BudgetStanding | null {
  if (!budget) return null;
  const usedMicros = BigInt(read.run_micros);
  const usedTokens = Number(read.run_tokens);
  const reached = (budget.maxMicros !== undefined && usedMicros >= BigInt(budget.maxMicros)) || (budget.maxTokens !== undefined && usedTokens >= budget.maxTokens);
  return { maxMicros: budget.maxMicros ?? null, maxTokens: budget.maxTokens ?? null, usedMicros: String(usedMicros), usedTokens, reached, note: budgetNote(budget, read) };
}

/** What a look found: whether anything can pause the run, and the limit that holds now (if any), with the numbers. */
export interface Verdict {
  /** Something could pause this run (a ceiling, a stopping tokens allowance, a budget): worth looking again next turn. */
  limitable: boolean;
  holds: { limit: Limit; message: string } | null;
  allowance: Standing;
  budget: BudgetStanding | null;
}

export function judge(read: LimitsRead): Verdict {
  const plan = read.has_plan ? { allowance: read.allowance, spend_ceiling_micros: read.spend_ceiling_micros } : null;
  const allowance = standingOf(plan, read);
  const budget = budgetStanding(read.budget, read);
  // A run on svc/echo (route `service`) is free and counted against no plan: only its own budget holds it.
  const planApplies = read.route_kind !== "service";
  const stopsAtAllowance = planApplies && read.has_plan && read.unit === "tokens" && read.allowance !== null && read.overage === false;
  const atCeiling = planApplies && allowance.spend.reached;
  const limitable = (planApplies && allowance.spend.ceilingMicros !== null) || stopsAtAllowance || budget !== null;
  const resets = `the next window begins at ${allowance.resetsAt}`;
  let holds: Verdict["holds"] = null;
  if (atCeiling) {
    holds = {
      limit: "spend_ceiling",
      message: `The user's spend this window (${allowance.spend.usedMicros} micros) reached the plan's ceiling of ${allowance.spend.ceilingMicros} micros. The run resumes when the user moves to a plan with a higher ceiling (checkout, or PUT /v1/users/:id/plan), or when ${resets}.`,
    };
  } else if (stopsAtAllowance && allowance.reached) {
    holds = {
      limit: "allowance",
      message: `The user used ${allowance.used} of the plan's ${allowance.limit} tokens this window, and the plan stops at its allowance. The run resumes when the user moves to a larger plan (checkout, or PUT /v1/users/:id/plan), or when ${resets}.`,
    };
  } else if (budget?.reached) {
    const what = [budget.maxMicros !== null ? `${budget.usedMicros} of ${budget.maxMicros} micros` : null, budget.maxTokens !== null ? `${budget.usedTokens} of ${budget.maxTokens} tokens` : null].filter(Boolean).join(", ");
    holds = { limit: "run_budget", message: `The run used its budget (${what}). It resumes when the app raises it: POST /v1/runs/:id/budget.` };
  }
  return { limitable, holds, allowance, budget };
}

/**
 * Wakes the drivers of a user's paused runs (`user`: the app's id for them; null: every user of the
 * environment, a plan changed): a notification each, heard by whichever instance drives the run,
 * which looks at its limits again. What a lost notification misses, the driver's own look every
 * poll interval finds.
 */
export async function wakePausedRuns(db: Sql, tenant: Tenant, user: string | null): Promise<void> {
  await db.query(
    `SELECT pg_notify('${RUN_INPUT_CHANNEL}', r.id) FROM runs r JOIN end_users u ON u.id = r.end_user_id
      WHERE r.app_id = $1 AND r.environment = $2::"Environment" AND r.status = 'paused' AND ($3::text IS NULL OR u.external_id = $3)`,
    [tenant.appId, tenant.environment, user],
  );
}

/** A user's runs paused now, oldest first, each with what its `run_paused` said (the components' upgrade notice). */
export async function pausedRunsOf(db: Sql, tenant: Tenant, endUserId: string): Promise<{ runId: string; limit: Limit; message: string; pausedAt: string; expiresAt: string }[]> {
  const rows = await db.query<{ id: string; data: { limit: Limit; message: string; pausedAt: string; expiresAt: string } }>(
    `SELECT r.id, COALESCE(r.pause, e.data) AS data FROM runs r
       LEFT JOIN LATERAL (SELECT data FROM run_events WHERE r.pause IS NULL AND run_id = r.id AND kind = 'run_paused' ORDER BY seq DESC LIMIT 1) e ON true
      WHERE r.app_id = $1 AND r.environment = $2::"Environment" AND r.end_user_id = $3 AND r.status = 'paused'
      ORDER BY r.paused_at, r.id LIMIT 20`,
    [tenant.appId, tenant.environment, endUserId],
  );
  return rows.filter((r) => r.data).map((r) => ({ runId: r.id, limit: r.data.limit, message: r.data.message, pausedAt: r.data.pausedAt, expiresAt: r.data.expiresAt }));
}
