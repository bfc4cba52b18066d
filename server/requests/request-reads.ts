import type { z } from "zod";
import type { OwnerApiRequestPage, OwnerApiRequestQuery } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { keysetPage } from "../db/keyset-cursor.js";
import { ApiError } from "../errors.js";

interface Row {
  id: string;
  request_id: string;
  method: string;
  path: string;
  route: string;
  status: number;
  error_code: string | null;
  duration_ms: number;
  key_id: string;
  run_id: string | null;
  user: string | null;
  hint: string | null;
  name: string | null;
  created_at: Date | string;
}

/** The dashboard's read of the request log: one environment's requests, newest first, filtered. */
export async function listApiRequests(db: Database, tenant: Tenant, q: z.infer<typeof OwnerApiRequestQuery>, retentionDays: number): Promise<z.infer<typeof OwnerApiRequestPage>> {
  const params: unknown[] = [tenant.appId, tenant.environment];
  const where = [`r.app_id = $1`, `r.environment = $2::"Environment"`];
  const add = (sql: (n: string) => string, value: unknown) => {
    params.push(value);
    where.push(sql(`$${params.length}`));
  };
  if (q.outcome === "failed") where.push("r.status >= 400");
  if (q.outcome === "succeeded") where.push("r.status < 400");
  if (q.method) add((n) => `r.method = ${n}`, q.method);
  if (q.path) add((n) => `left(r.path, length(${n})) = ${n}`, q.path);
  if (q.requestId) add((n) => `r.request_id = ${n}`, q.requestId);
  if (q.user) add((n) => `coalesce(r."user", u.external_id) = ${n}`, q.user);
  const { rows, hasMore, nextCursor } = await keysetPage(q, (after, take) => {
    if (after) {
      if (!/^\d{1,19}$/.test(after.id)) throw new ApiError("invalid_request", "Invalid query field `cursor`: pass the `nextCursor` of a previous page.", { param: "cursor" });
      params.push(after.createdAt, after.id);
      where.push(`(r.created_at, r.id) < ($${params.length - 1}::timestamptz, $${params.length}::bigint)`);
    }
    params.push(take);
    return db.query<Row>(
      `SELECT r.id::text AS id, r.request_id, r.method, r.path, r.route, r.status, r.error_code, r.duration_ms, r.key_id, k.hint, k.name, r.created_at,
              r.run_id, coalesce(r."user", u.external_id) AS "user"
         FROM api_requests r
         LEFT JOIN app_keys k ON k.id = r.key_id
         LEFT JOIN runs ru ON ru.id = r.run_id AND ru.app_id = r.app_id AND ru.environment = r.environment
         LEFT JOIN end_users u ON u.id = ru.end_user_id
        WHERE ${where.join(" AND ")}
        ORDER BY r.created_at DESC, r.id DESC
        LIMIT $${params.length}`,
      params,
    );
  }, (r) => r.created_at);
  return {
    data: rows.map((r) => ({
      id: r.id,
      requestId: r.request_id,
      method: r.method,
      path: r.path,
      route: r.route,
      status: r.status,
      errorCode: r.error_code,
      durationMs: r.duration_ms,
      runId: r.run_id,
      user: r.user,
      key: { id: r.key_id, display: r.hint ?? `sk_svc_${r.key_id}.…`, name: r.name },
      createdAt: new Date(r.created_at).toISOString(),
    })),
    hasMore,
    nextCursor,
    retentionDays,
  };
}
