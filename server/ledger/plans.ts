import { wakePausedRuns } from "../runs/limits.js";
import type { z } from "zod";
import type { AllowanceUnit, Plan as PlanView, PlanInput, PlanPeriod, PlanUpdate } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { micros } from "./money.js";

/** A plan's row as the ledger's SQL reads it. */
export interface PlanRow {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  price_micros: string | number;
  currency: string;
  period: PlanPeriod;
  allowance_unit: AllowanceUnit;
  allowance: string | number | null;
  overage: boolean;
  overage_price_micros: string | number | null;
  spend_ceiling_micros: string | number | null;
  alert_thresholds: number[] | null;
  trial_days: number;
  stripe_price_id: string | null;
  is_default: boolean;
  archived_at: Date | string | null;
}

export const PLAN_COLUMNS = `p.id, p.slug, p.name, p.description, p.price_micros, p.currency, p.period, p.allowance_unit::text AS allowance_unit,
  p.allowance, p.overage, p.overage_price_micros, p.spend_ceiling_micros, p.alert_thresholds, p.trial_days, p.stripe_price_id, p.is_default, p.archived_at`;

export function planView(p: PlanRow): z.infer<typeof PlanView> {
  return {
    id: p.id,
    slug: p.slug,
    name: p.name,
    description: p.description,
    priceMicros: micros(p.price_micros),
    currency: p.currency,
    period: p.period,
    allowance: { unit: p.allowance_unit, limit: p.allowance === null ? null : micros(p.allowance) },
    overage: p.overage,
    overagePriceMicros: p.overage_price_micros === null ? null : micros(p.overage_price_micros),
    spendCeilingMicros: p.spend_ceiling_micros === null ? null : micros(p.spend_ceiling_micros),
    alertThresholds: p.alert_thresholds ?? [80, 100],
    trialDays: p.trial_days,
    stripePriceId: p.stripe_price_id,
    isDefault: p.is_default,
    archived: p.archived_at !== null,
  };
}

/**
 * The plans an app sells, per environment: created, changed and archived with
 * the app key (`/v1/plans`), the CLI (`svc plans ...`) or a plans file (`svc
 * plans apply`). At most one live plan is the default, the plan users without
 * a subscription are on. A plan is never deleted (subscriptions and the ledger
 * refer to it): archiving stops selling it.
 */
export class PlanService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async list(tenant: Tenant, opts: { archived?: boolean } = {}): Promise<z.infer<typeof PlanView>[]> {
    const rows = await this.db.query<PlanRow>(
      `SELECT ${PLAN_COLUMNS} FROM plans p WHERE p.app_id = $1 AND p.environment = $2::"Environment" ${opts.archived ? "" : "AND p.archived_at IS NULL"}
       ORDER BY p.archived_at IS NOT NULL, p.price_micros, p.created_at`,
      [tenant.appId, tenant.environment],
    );
    return rows.map(planView);
  }

  async bySlug(tenant: Tenant, slug: string): Promise<PlanRow | null> {
    const rows = await this.db.query<PlanRow>(`SELECT ${PLAN_COLUMNS} FROM plans p WHERE p.app_id = $1 AND p.environment = $2::"Environment" AND p.slug = $3`, [
      tenant.appId,
      tenant.environment,
      slug,
    ]);
    return rows[0] ?? null;
  }

  async get(tenant: Tenant, slug: string): Promise<PlanRow> {
    const row = await this.bySlug(tenant, slug);
    if (!row) throw new ApiError("not_found", `No plan \`${slug}\` in the ${tenant.environment} environment.`);
    return row;
  }

  async create(tenant: Tenant, input: PlanInput): Promise<z.infer<typeof PlanView>> {
    checkRules(input);
    const id = randomId("plan_", 20);
    return this.inTransaction(async (q) => {
      if (input.isDefault) await this.clearDefault(q, tenant);
      const rows = await q<{ id: string }>(
        `INSERT INTO plans (id, app_id, environment, slug, name, description, price_micros, currency, period, allowance_unit, allowance, overage,
                            overage_price_micros, spend_ceiling_micros, trial_days, stripe_price_id, is_default, created_at, alert_thresholds)
         VALUES ($1, $2, $3::"Environment", $4, $5, $6, $7, $8, $9, $10::"AllowanceUnit", $11, $12, $13, $14, $15, $16, $17, $18, $19::int[])
         ON CONFLICT (app_id, environment, slug) DO NOTHING RETURNING id`,
        [
          id, tenant.appId, tenant.environment, input.slug, input.name, input.description ?? null, input.priceMicros, input.currency, input.period,
          input.allowance.unit, input.allowance.limit, input.overage, input.overagePriceMicros ?? null, input.spendCeilingMicros ?? null, input.trialDays,
          input.stripePriceId ?? null, input.isDefault, this.clock.now(), input.alertThresholds,
        ],
      );
      if (rows.length === 0) throw new ApiError("plan_exists", `A plan \`${input.slug}\` already exists in the ${tenant.environment} environment (archived ones too): change it with PATCH /v1/plans/${input.slug}.`);
      return planView((await q<PlanRow>(`SELECT ${PLAN_COLUMNS} FROM plans p WHERE p.id = $1`, [id]))[0]);
    });
  }

  async update(tenant: Tenant, slug: string, change: PlanUpdate): Promise<z.infer<typeof PlanView>> {
    const updated = await this.change(tenant, slug, change);
    // A ceiling or allowance raised resumes runs paused at it: every paused run of the environment looks again.
    await wakePausedRuns(this.db, tenant, null);
    return updated;
  }

  private async change(tenant: Tenant, slug: string, change: PlanUpdate): Promise<z.infer<typeof PlanView>> {
    const current = planView(await this.get(tenant, slug));
    const next = {
      ...current,
      ...Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined)),
      description: change.description === undefined ? current.description : change.description,
    } as z.infer<typeof PlanView>;
    checkRules(next);
    if (current.archived && change.isDefault) throw new ApiError("plan_unavailable", `Plan \`${slug}\` is archived: it cannot be the default.`);
    return this.inTransaction(async (q) => {
      if (change.isDefault) await this.clearDefault(q, tenant);
      await q(
        `UPDATE plans SET name = $2, description = $3, price_micros = $4, currency = $5, period = $6, allowance_unit = $7::"AllowanceUnit", allowance = $8,
                overage = $9, overage_price_micros = $10, spend_ceiling_micros = $11, trial_days = $12, stripe_price_id = $13, is_default = $14,
                alert_thresholds = $15::int[]
          WHERE id = $1`,
        [
          current.id, next.name, next.description, next.priceMicros, next.currency, next.period, next.allowance.unit, next.allowance.limit, next.overage,
          next.overagePriceMicros ?? null, next.spendCeilingMicros ?? null, next.trialDays, next.stripePriceId ?? null, next.isDefault, next.alertThresholds,
        ],
      );
      return planView((await q<PlanRow>(`SELECT ${PLAN_COLUMNS} FROM plans p WHERE p.id = $1`, [current.id]))[0]);
    });
  }

  /** Stops selling a plan; it is no longer the default. Its subscribers keep it. */
  async archive(tenant: Tenant, slug: string): Promise<z.infer<typeof PlanView>> {
    const plan = await this.get(tenant, slug);
    await this.db.query(`UPDATE plans SET archived_at = COALESCE(archived_at, $2), is_default = false WHERE id = $1`, [plan.id, this.clock.now()]);
    return planView((await this.get(tenant, slug)));
  }

  private async clearDefault(q: Query, tenant: Tenant) {
    await q(`UPDATE plans SET is_default = false WHERE app_id = $1 AND environment = $2::"Environment" AND is_default`, [tenant.appId, tenant.environment]);
  }

  /** Several statements as one: on one connection inside BEGIN/COMMIT. */
  private async inTransaction<T>(fn: (q: Query) => Promise<T>): Promise<T> {
    return this.db.prisma.$transaction(async (tx) => fn((sql, params = []) => tx.$queryRawUnsafe(sql, ...params)), { timeout: 15_000 });
  }
}

type Query = <T = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;

function checkRules(p: { overage: boolean; overagePriceMicros?: number | null; allowance: { limit: number | null } }) {
  if (p.overagePriceMicros != null && !p.overage) throw new ApiError("invalid_request", "`overagePriceMicros` is only meaningful with `overage: true`.", { param: "overagePriceMicros" });
  if (p.overage && p.allowance.limit === null) throw new ApiError("invalid_request", "An unlimited plan has no overage: set `allowance.limit` or `overage: false`.", { param: "overage" });
}
