import type { z } from "zod";
import type { OwnerOverview } from "@svc/contract";
import type { Clock } from "../clock.js";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { environmentCurrency } from "../ledger/usage-summary.js";
import { machineOnlineSql } from "../machines/liveness.js";

const DAY_MS = 86_400_000;

/**
 * One environment at a glance, for the dashboard's landing page: nine statements read
 * side by side, each over an index of the environment's rows. Days and the month are
 * UTC, like the ledger's periods.
 */
export async function overviewOf(db: Database, clock: Clock, tenant: Tenant, heartbeatTimeoutSeconds: number, requestLogEnabled: boolean): Promise<z.infer<typeof OwnerOverview>> {
  const now = clock.now();
  const today = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  const month = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const lastMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1));
  const weekAgo = new Date(now.getTime() - 7 * DAY_MS);
  const dayAgo = new Date(now.getTime() - DAY_MS);
  const seen = new Date(now.getTime() - heartbeatTimeoutSeconds * 1000);
  const t = [tenant.appId, tenant.environment];
  const env = `app_id = $1 AND environment = $2::"Environment"`;
  const [currency, [runs], [spend], [users], [machines], [requests], [webhooks], [previousRuns], failures] = await Promise.all([
    environmentCurrency(db, tenant),
    db.query<{ today: number; period: number; failed_today: number; handed_back_today: number; handed_back: number; live: number; paused: number }>(
      `SELECT count(*) FILTER (WHERE created_at >= $3)::int AS today, count(*)::int AS period,
              count(*) FILTER (WHERE created_at >= $3 AND status = 'failed')::int AS failed_today,
              count(*) FILTER (WHERE created_at >= $3 AND status = 'handed_back')::int AS handed_back_today,
              count(*) FILTER (WHERE status = 'handed_back')::int AS handed_back,
              count(*) FILTER (WHERE status IN ('queued', 'running', 'waiting', 'paused'))::int AS live,
              count(*) FILTER (WHERE status = 'paused')::int AS paused
         FROM runs WHERE ${env} AND created_at >= $4`,
      [...t, today, month],
    ),
    db.query<{ today: string; period: string; tokens: string; previous: string; previous_tokens: string }>(
      `SELECT coalesce(sum(amount_micros) FILTER (WHERE created_at >= $3), 0)::text AS today,
              coalesce(sum(amount_micros) FILTER (WHERE created_at >= $4), 0)::text AS period,
              coalesce(sum(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens) FILTER (WHERE created_at >= $4), 0)::text AS tokens,
              coalesce(sum(amount_micros) FILTER (WHERE created_at < $4), 0)::text AS previous,
              coalesce(sum(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens) FILTER (WHERE created_at < $4), 0)::text AS previous_tokens
         FROM usage_rows WHERE ${env} AND created_at >= $5`,
      [...t, today, month, lastMonth],
    ),
    db.query<{ total: number; active: number }>(
      `SELECT (SELECT count(*)::int FROM end_users WHERE ${env}) AS total,
              (SELECT count(DISTINCT end_user_id)::int FROM runs WHERE ${env} AND created_at >= $3) AS active`,
      [...t, month],
    ),
    db.query<{ paired: number; online: number }>(
      `SELECT count(*)::int AS paired,
              count(*) FILTER (WHERE ${machineOnlineSql("machines", "$3")})::int AS online
         FROM machines WHERE ${env} AND revoked_at IS NULL`,
      [...t, seen],
    ),
    requestLogEnabled
      ? db.query<{ total: number; failed: number }>(
          `SELECT count(*)::int AS total, count(*) FILTER (WHERE status >= 400)::int AS failed FROM api_requests WHERE ${env} AND created_at > $3`,
          [...t, dayAgo],
        )
      : Promise.resolve([{ total: 0, failed: 0 }]),
    db.query<{ failed: number; retrying: number; endpoints: number }>(
      `SELECT count(*) FILTER (WHERE status = 'failed' AND created_at > $3)::int AS failed,
              count(*) FILTER (WHERE status = 'pending' AND attempts > 0)::int AS retrying,
              (SELECT count(*)::int FROM webhook_endpoints WHERE ${env}) AS endpoints
         FROM webhook_deliveries WHERE ${env} AND (created_at > $3 OR status = 'pending')`,
      [...t, dayAgo],
    ),
    db.query<{ runs: number }>(`SELECT count(*)::int AS runs FROM runs WHERE ${env} AND created_at >= $3 AND created_at < $4`, [...t, lastMonth, month]),
    db.query<{ id: string; user: string; error: { code?: unknown; message?: unknown } | null; at: Date | string }>(
      `SELECT r.id, u.external_id AS "user", r.error, coalesce(r.finished_at, r.created_at) AS at
         FROM runs r JOIN end_users u ON u.id = r.end_user_id
        WHERE r.app_id = $1 AND r.environment = $2::"Environment" AND r.status = 'failed' AND r.created_at >= $3
        ORDER BY r.created_at DESC, r.id DESC LIMIT 5`,
      [...t, weekAgo],
    ),
  ]);
  return {
    period: month.toISOString().slice(0, 7),
    runs: { today: runs.today, period: runs.period, failedToday: runs.failed_today, handedBackToday: runs.handed_back_today, handedBackPeriod: runs.handed_back, live: runs.live, paused: runs.paused },
    spend: { currency, todayMicros: Number(spend.today), periodMicros: Number(spend.period) },
    tokens: { period: Number(spend.tokens) },
    previous: { period: lastMonth.toISOString().slice(0, 7), runs: previousRuns.runs, spendMicros: Number(spend.previous), tokens: Number(spend.previous_tokens) },
    recentFailures: failures.map((f) => ({
      runId: f.id,
      user: f.user,
      code: typeof f.error?.code === "string" ? f.error.code : null,
      message: typeof f.error?.message === "string" ? f.error.message.slice(0, 500) : null,
      at: new Date(f.at).toISOString(),
    })),
    users: { total: users.total, activeThisPeriod: users.active },
    machines: { paired: machines.paired, online: machines.online },
    requests: { last24h: requests.total, failedLast24h: requests.failed, logEnabled: requestLogEnabled },
    webhooks: { failedLast24h: webhooks.failed, retrying: webhooks.retrying, endpoints: webhooks.endpoints },
    generatedAt: now.toISOString(),
  };
}
