import type { z } from "zod";
import type { WebhookDelivery, WebhookDeliveryPage, WebhookDeliveryQuery, WebhookDeliveryStatus, WebhookEventType, WebhookPayload } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { keysetPage } from "../db/keyset-cursor.js";

interface DeliveryRow {
  id: string;
  endpoint_id: string;
  event_type: string;
  payload: z.infer<typeof WebhookPayload>;
  status: WebhookDeliveryStatus;
  next_attempt_at: Date | null;
  last_error: string | null;
  delivered_at: Date | null;
  created_at: Date;
  attempts: { attempt: number; at: string; statusCode: number | null; error: string | null; durationMs: number }[];
}

/**
 * The delivery log the app reads: every delivery of its environment, newest
 * first, with each attempt's status code or error. Pages are keyed on
 * (created_at, id), so rows written while the app pages through never shift it.
 */
export class WebhookDeliveryLog {
  constructor(private readonly db: Database) {}

  async list(tenant: Tenant, q: z.infer<typeof WebhookDeliveryQuery>): Promise<z.infer<typeof WebhookDeliveryPage>> {
    const { rows, hasMore, nextCursor } = await keysetPage(q, (after, take) =>
      this.db.query<DeliveryRow>(
        `SELECT ${DELIVERY_COLUMNS}
           FROM webhook_deliveries d
          WHERE d.app_id = $1 AND d.environment = $2::"Environment"
            AND ($3::text IS NULL OR d.endpoint_id = $3)
            AND ($4::text IS NULL OR d.status = $4::"WebhookDeliveryStatus")
            AND ($5::text IS NULL OR d.event_type = $5)
            AND ($6::timestamptz IS NULL OR (d.created_at, d.id) < ($6::timestamptz, $7::text))
          ORDER BY d.created_at DESC, d.id DESC
          LIMIT $8`,
        [tenant.appId, tenant.environment, q.endpoint ?? null, q.status ?? null, q.type ?? null, after?.createdAt ?? null, after?.id ?? null, take],
      ),
      (r) => r.created_at,
    );
    return { data: rows.map(view), hasMore, nextCursor };
  }

  /** One delivery of the tenant, with every attempt; another tenant's is as unknown as a made-up id. */
  async get(tenant: Tenant, id: string): Promise<z.infer<typeof WebhookDelivery>> {
    const rows = await this.db.query<DeliveryRow>(
      `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.id = $1 AND d.app_id = $2 AND d.environment = $3::"Environment"`,
      [id, tenant.appId, tenant.environment],
    );
    if (!rows[0]) throw new ApiError("not_found", `No webhook delivery ${id}.`);
    return view(rows[0]);
  }
}

const DELIVERY_COLUMNS = `d.id, d.endpoint_id, d.event_type, d.payload, d.status, d.next_attempt_at, d.last_error, d.delivered_at, d.created_at,
  COALESCE((SELECT jsonb_agg(jsonb_build_object('attempt', a.attempt, 'at', a.at, 'statusCode', a.status_code, 'error', a.error, 'durationMs', a.duration_ms) ORDER BY a.attempt)
              FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]'::jsonb) AS attempts`;

function view(r: DeliveryRow): z.infer<typeof WebhookDelivery> {
  return {
    id: r.id,
    endpointId: r.endpoint_id,
    type: r.event_type as WebhookEventType,
    payload: r.payload,
    status: r.status,
    attempts: r.attempts.map((a) => ({ ...a, at: new Date(a.at).toISOString() })),
    nextAttemptAt: r.status === "pending" && r.next_attempt_at ? new Date(r.next_attempt_at).toISOString() : null,
    lastError: r.last_error,
    deliveredAt: r.delivered_at ? new Date(r.delivered_at).toISOString() : null,
    createdAt: new Date(r.created_at).toISOString(),
  };
}
