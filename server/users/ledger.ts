import { wakePausedRuns } from "../runs/limits.js";
import type { z } from "zod";
import type { User } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { MachineService } from "../machines/machines.js";
import type { WebhookFacts } from "../webhooks/facts.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { ensureEndUser } from "./end-users.js";
import { periodOf } from "../ledger/metering.js";
import { micros } from "../ledger/money.js";
import { subscriptionLiveSql, userPlanSql, userSubscriptionSql, userUsage } from "../ledger/functions.js";
import { PLAN_COLUMNS, planView, type PlanRow } from "../ledger/plans.js";
import { standingOf } from "./standing.js";
import type { PlanService } from "../ledger/plans.js";

type UserView = z.infer<typeof User>;

/** The user of the statements below: app `$1`, environment `$2`, end user `$3`. */
const USER = { app: "$1", environment: `$2::"Environment"`, user: "$3" };

/**
 * A user as the app reads them (`GET /v1/users/:id`): their plan (a live
 * subscription's, one bought through Stripe first, else the app's default), the
 * allowance and the usage of the plan's current window, and what they have
 * connected. Every number is a sum of ledger rows, read in one statement; the
 * run start (`svc_start_run`) decides with the same rules.
 */
export class UserLedger {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly machines: MachineService,
    private readonly plans: PlanService,
    private readonly facts: WebhookFacts,
  ) {}

  async view(tenant: Tenant, externalId: string): Promise<UserView> {
    const users = await this.db.query<{ id: string; email: string | null; created_at: Date | string }>(
      `SELECT id, email, created_at FROM end_users WHERE app_id = $1 AND environment = $2::"Environment" AND external_id = $3`,
      [tenant.appId, tenant.environment, externalId],
    );
    const user = users[0];
    if (!user) throw new ApiError("not_found", `No user \`${externalId}\` in the ${tenant.environment} environment: a user appears with their first session, run or chat request.`);
    return this.viewOf(tenant, user.id, externalId, user.email, new Date(user.created_at));
  }

  private async viewOf(tenant: Tenant, endUserId: string, externalId: string, email: string | null, createdAt: Date): Promise<UserView> {
    const now = this.clock.now();
    const month = periodOf(now);
    const [subs, machines] = await Promise.all([
      this.db.query<PlanRow & { sub_status: string | null; sub_source: string | null; trial_ends_at: Date | string | null; current_period_end: Date | string | null; from_default: boolean }>(
        // The plan and the subscription deciding it, by the SQL functions the run start uses (prisma/functions/).
        `SELECT ${PLAN_COLUMNS}, s.status AS sub_status, s.source AS sub_source, s.trial_ends_at, s.current_period_end, s.id IS NULL AS from_default
           FROM plans p LEFT JOIN subscriptions s ON s.id = ${userSubscriptionSql(USER)}
          WHERE p.id = ${userPlanSql(USER)}`,
        [tenant.appId, tenant.environment, endUserId],
      ),
      this.machines.listForUser(tenant, endUserId),
    ]);
    const plan = subs[0] ?? null;
    // The plan's window and what it holds, and the usage its allowance counts: the run start's own rules (svc_user_usage).
    const sum = await userUsage(this.db, { appId: tenant.appId, environment: tenant.environment, endUserId, period: month });
    const usage = { runs: micros(sum.runs), inputTokens: micros(sum.input_tokens), outputTokens: micros(sum.output_tokens), cacheReadTokens: micros(sum.cache_read_tokens), cacheWriteTokens: micros(sum.cache_write_tokens), amountMicros: micros(sum.amount_micros) };
    const online = machines.filter((m) => m.state !== "offline");
    return {
      id: externalId,
      email,
      environment: tenant.environment,
      plan: plan ? planView(plan) : null,
      subscription:
        plan && !plan.from_default && plan.sub_status
          ? {
              status: plan.sub_status,
              source: plan.sub_source === "app" ? "app" : "stripe",
              trialEndsAt: iso(plan.trial_ends_at),
              currentPeriodEnd: iso(plan.current_period_end),
            }
          : null,
      allowance: standingOf(plan, sum),
      usage: { period: sum.period, ...usage },
      connected: {
        machines: machines.length,
        online: online.length,
        runtimes: [...new Set(online.flatMap((m) => m.runtimes.filter((r) => r.state !== "offline").map((r) => r.name)))].sort(),
      },
      createdAt: createdAt.toISOString(),
    };
  }

  /**
   * The app puts a user on a plan without a payment (`plan: null`: back to the
   * default). It ends the previous app-set subscription and starts the new one
   * in one transaction; a live Stripe subscription still takes precedence.
   */
  async assignPlan(tenant: Tenant, externalId: string, slug: string | null): Promise<UserView> {
    const plan = slug === null ? null : await this.plans.get(tenant, slug);
    if (plan && plan.archived_at !== null) throw new ApiError("plan_unavailable", `Plan \`${slug}\` is archived.`);
    const endUserId = await ensureEndUser(this.db, tenant, externalId);
    const before = await this.view(tenant, externalId);
    const now = this.clock.now();
    await this.db.prisma.$transaction(async (tx) => {
      // The user's row locked, as at a run start: two assignments at once leave one live subscription.
      await tx.$queryRawUnsafe(`SELECT 1 FROM end_users WHERE id = $1 FOR NO KEY UPDATE`, endUserId);
      await tx.$executeRawUnsafe(
        `UPDATE subscriptions SET status = 'canceled', canceled_at = $4, updated_at = $4
          WHERE app_id = $1 AND environment = $2::"Environment" AND end_user_id = $3 AND source = 'app' AND ${subscriptionLiveSql("status")}`,
        tenant.appId, tenant.environment, endUserId, now,
      );
      if (plan) {
        await tx.$executeRawUnsafe(
          `INSERT INTO subscriptions (id, app_id, environment, end_user_id, plan_id, status, source, current_period_start, created_at, updated_at)
           VALUES ($1, $2, $3::"Environment", $4, $5, 'active', 'app', $6, $6, $6)`,
          randomId("sub_", 20), tenant.appId, tenant.environment, endUserId, plan.id, now,
        );
      }
    });
    const after = await this.view(tenant, externalId);
    // A run of the user paused at the plan's ceiling or allowance looks again (an upgrade resumes it).
    await wakePausedRuns(this.db, tenant, externalId);
    if (before.plan?.id !== after.plan?.id) {
      await this.facts.planChanged(
        tenant,
        externalId,
        { plan: after.plan?.slug ?? null, previousPlan: before.plan?.slug ?? null, status: after.subscription?.status ?? null, source: "app" },
        `plan.changed:app:${endUserId}:${now.getTime()}`,
      );
    }
    return after;
  }
}

function iso(v: Date | string | null): string | null {
  return v === null ? null : new Date(v).toISOString();
}
