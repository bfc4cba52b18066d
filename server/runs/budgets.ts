import type { Database } from "../db/open.js";
import { ApiError } from "../errors.js";
import type { Tenant } from "../keys/keys.js";
import { periodOf } from "../ledger/metering.js";
import { userPlanSql } from "../ledger/functions.js";
import type { RunEngine } from "./engine.js";
import { budgetNote, budgetStanding, readLimits, type Budget, type BudgetStanding, type LimitsRead } from "./limits.js";
import { ACTIVE_STATUSES, ACTIVE_STATUSES_SQL } from "./run-rows.js";

/**
 * A run's own budget: what the app caps it at (`budget` on `POST /v1/runs`), and
 * `POST /v1/runs/:id/budget`, which replaces it field by field and wakes the run's
 * driver wherever it is, so a run paused at its budget resumes at once.
 */
export class RunBudgets {
  constructor(
    private readonly db: Database,
    private readonly engine: RunEngine,
  ) {}

  /** Why a budget given at a run's start may never be reached (read before the run is stored, so it is kept with it). */
  async noteOf(tenant: Tenant, endUserId: string, budget: Budget, route: Pick<LimitsRead, "route_kind" | "runtime_kind">): Promise<string | null> {
    const user = { app: "$1", environment: `$2::"Environment"`, user: "$3" };
    const [plan] = await this.db.query<Pick<LimitsRead, "overage" | "overage_price_micros">>(
      `SELECT p.overage, p.overage_price_micros FROM plans p WHERE p.id = ${userPlanSql(user)}`,
      [tenant.appId, tenant.environment, endUserId],
    );
    return budgetNote(budget, { has_plan: plan !== undefined, overage: plan?.overage ?? null, overage_price_micros: plan?.overage_price_micros ?? null, ...route });
  }

  /** Replaces the fields given; 409 `run_finished` once the run has ended. Answers the budget against what the run used. */
  async raise(run: { id: string; status: string }, change: Budget, now: Date): Promise<{ runId: string; status: string; budget: BudgetStanding }> {
    const runId = run.id;
    const given = Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined));
    const rows = await this.db.query<{ status: string }>(
      `UPDATE runs SET budget = COALESCE(budget, request->'budget', '{}'::jsonb) || $2::jsonb
        WHERE id = $1 AND status IN (${ACTIVE_STATUSES_SQL}) RETURNING status::text AS status`,
      [runId, JSON.stringify(given)],
    );
    // The caller found the run: not updated, it had ended (as it was found, or meanwhile).
    if (!rows[0]) {
      const when = (ACTIVE_STATUSES as readonly string[]).includes(run.status) ? "just now" : run.status;
      throw new ApiError("run_finished", `Run ${runId} has already ended (${when}): its budget can no longer change.`);
    }
    await this.engine.wake(runId);
    const read = await readLimits(this.db, runId, periodOf(now));
    if (!read?.budget) throw new ApiError("internal_error", `Run ${runId}'s budget could not be read back.`);
    return { runId, status: rows[0].status, budget: budgetStanding(read.budget, read)! };
  }
}
