import type { z } from "zod";
import type { CostClass, Environment, UsagePage, UsageQuery, UsageRow } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { micros } from "./money.js";

/** The largest BIGINT: a cursor past it names no row (and Postgres would refuse to compare with it). */
const MAX_BIGINT = 9223372036854775807n;

export interface UsageRowRecord {
  id: string | number;
  external_id: string;
  environment: Environment;
  run_id: string | null;
  cost_class: CostClass;
  kind: string;
  input_tokens: string | number;
  output_tokens: string | number;
  cache_read_tokens: string | number;
  cache_write_tokens: string | number;
  amount_micros: string | number;
  period: string;
  created_at: Date | string;
}

/**
 * `GET /v1/usage`: the ledger's rows in id order (ascending), paged by a cursor
 * (the last id read), so an app syncing the ledger reads on from where it
 * stopped and never sees a row twice. Filters: user, period, environment (the
 * key's own), run, cost class. (Rows written at the same moment may commit out
 * of id order: a sync that must see every row re-reads its last few seconds.)
 */
export async function listUsage(db: Database, tenant: Tenant, q: z.infer<typeof UsageQuery>): Promise<z.infer<typeof UsagePage>> {
  if (q.environment && q.environment !== tenant.environment) {
    throw new ApiError("forbidden", `This key belongs to the ${tenant.environment} environment; use a ${q.environment} key to read ${q.environment} usage.`);
  }
  let after = 0n;
  if (q.cursor !== undefined) {
    if (!/^\d{1,19}$/.test(q.cursor) || BigInt(q.cursor) > MAX_BIGINT) throw new ApiError("invalid_request", "`cursor` is not one this endpoint returned.", { param: "cursor" });
    after = BigInt(q.cursor);
  }
  const where = [`u.app_id = $1`, `u.environment = $2::"Environment"`, `u.id > $3`];
  const params: unknown[] = [tenant.appId, tenant.environment, after.toString()];
  const add = (sql: string, v: unknown) => {
    params.push(v);
    where.push(sql.replace("?", `$${params.length}`));
  };
  if (q.user !== undefined) add(`e.external_id = ?`, q.user);
  if (q.period !== undefined) add(`u.period = ?`, q.period);
  if (q.run !== undefined) add(`u.run_id = ?`, q.run);
  if (q.costClass !== undefined) add(`u.cost_class = ?::"CostClass"`, q.costClass);
  params.push(q.limit + 1);
  const rows = await db.query<UsageRowRecord>(
    `SELECT ${USAGE_ROW_COLUMNS}
       FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id
      WHERE ${where.join(" AND ")}
      ORDER BY u.id LIMIT $${params.length}`,
    params,
  );
  const page = rows.slice(0, q.limit);
  const hasMore = rows.length > q.limit;
  return { data: page.map(usageRowView), hasMore, nextCursor: hasMore ? String(page[page.length - 1].id) : null };
}

export const USAGE_ROW_COLUMNS = `u.id::text AS id, e.external_id, u.environment::text AS environment, u.run_id, u.cost_class::text AS cost_class, u.kind,
  u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.amount_micros, u.period, u.created_at`;

export function usageRowView(r: UsageRowRecord): z.infer<typeof UsageRow> {
  return {
    id: String(r.id),
    user: r.external_id,
    environment: r.environment,
    runId: r.run_id,
    costClass: r.cost_class,
    kind: r.kind,
    inputTokens: micros(r.input_tokens),
    outputTokens: micros(r.output_tokens),
    cacheReadTokens: micros(r.cache_read_tokens),
    cacheWriteTokens: micros(r.cache_write_tokens),
    amountMicros: micros(r.amount_micros),
    period: r.period,
    createdAt: new Date(r.created_at).toISOString(),
  };
}

/** Every ledger row of one run of the tenant, in order. */
export async function usageOfRun(db: Database, tenant: Tenant, runId: string): Promise<z.infer<typeof UsageRow>[]> {
  const rows = await db.query<UsageRowRecord>(
    `SELECT ${USAGE_ROW_COLUMNS} FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id
      WHERE u.app_id = $1 AND u.environment = $2::"Environment" AND u.run_id = $3 ORDER BY u.id`,
    [tenant.appId, tenant.environment, runId],
  );
  return rows.map(usageRowView);
}
