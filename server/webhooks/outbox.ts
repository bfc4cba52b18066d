import type { WebhookEventType } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { Clock } from "../clock.js";
import { randomId } from "../crypto.js";

/** Wakes the webhook dispatcher of every instance: a delivery is due. */
export const WEBHOOK_DUE_CHANNEL = "svc_webhook_due";

/**
 * The outbox of outbound webhooks. `emit` records one delivery per endpoint of
 * the tenant subscribed to `type`, in one statement; `key` names the fact (e.g.
 * `run.finished:<runId>`), so the same fact emitted twice (a retry, a takeover,
 * two instances) is delivered once. The dispatcher (dispatcher.ts) sends them.
 *
 * A webhook only says something happened; the read endpoints stay the authority.
 * An emit that fails is logged by the caller and never fails the fact itself.
 */
export class WebhookOutbox {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async emit(tenant: Tenant, type: WebhookEventType, data: Record<string, unknown>, key: string): Promise<number> {
    const now = this.clock.now();
    const payload = { type, timestamp: now.toISOString(), data };
    const rows = await this.db.query<{ id: string }>(
      `INSERT INTO webhook_deliveries (id, app_id, environment, endpoint_id, event_type, payload, event_key, next_attempt_at, created_at)
       SELECT $1 || substr(md5(e.id || $6), 1, 12), e.app_id, e.environment, e.id, $4, $5::jsonb, $6, $7, $7
         FROM webhook_endpoints e
        WHERE e.app_id = $2 AND e.environment = $3::"Environment" AND e.disabled_at IS NULL AND $4 = ANY(e.event_types)
       ON CONFLICT (endpoint_id, event_key) DO NOTHING
       RETURNING id`,
      [randomId("msg_", 16), tenant.appId, tenant.environment, type, JSON.stringify(payload), key, now],
    );
    if (rows.length > 0) await this.db.notify(WEBHOOK_DUE_CHANNEL, `${tenant.appId} ${tenant.environment}`);
    return rows.length;
  }
}
