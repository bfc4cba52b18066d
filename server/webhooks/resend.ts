import type { z } from "zod";
import type { WebhookDelivery } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { WEBHOOK_DUE_CHANNEL } from "./outbox.js";
import type { WebhookDeliveryLog } from "./deliveries.js";

/**
 * What the dashboard asks of the outbox by hand: a delivery sent again, and a
 * test event. Both only queue (the dispatcher sends, signs and logs the attempt
 * as for any delivery) and both refuse an endpoint that was removed.
 */
export class WebhookManualSends {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly log: WebhookDeliveryLog,
  ) {}

  /**
   * The same delivery again: the stored payload under the same `webhook-id` (the
   * delivery's id, by which receivers deduplicate), due now, so its next attempt
   * is the next number in its log. A delivery still pending is already queued and
   * is left as it is: its next time may be the lease of an attempt in flight, and
   * moving it would send the same delivery twice at once.
   */
  async resend(tenant: Tenant, id: string): Promise<z.infer<typeof WebhookDelivery>> {
    const now = this.clock.now();
    const rows = await this.db.query<{ disabled: boolean; queued: boolean }>(
      `WITH d AS (
         SELECT d.id, e.disabled_at IS NOT NULL AS disabled FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
          WHERE d.id = $1 AND d.app_id = $2 AND d.environment = $3::"Environment" FOR UPDATE OF d),
       q AS (
         UPDATE webhook_deliveries w SET status = 'pending', next_attempt_at = $4, delivered_at = NULL
           FROM d WHERE w.id = d.id AND NOT d.disabled AND w.status <> 'pending'
         RETURNING 1)
       SELECT d.disabled, EXISTS (SELECT 1 FROM q) AS queued FROM d`,
      [id, tenant.appId, tenant.environment, now],
    );
    if (!rows[0]) throw new ApiError("not_found", `No webhook delivery ${id}.`);
    if (rows[0].disabled) throw new ApiError("endpoint_disabled", `The endpoint of delivery ${id} was removed: it is not sent again.`);
    await this.db.notify(WEBHOOK_DUE_CHANNEL, `${tenant.appId} ${tenant.environment}`);
    return this.log.get(tenant, id);
  }

  /** A `test.ping` to this endpoint only, whatever event types it chose. Answers the delivery's id. */
  async ping(tenant: Tenant, endpointId: string): Promise<{ deliveryId: string }> {
    const now = this.clock.now();
    const id = randomId("msg_", 28);
    const payload = { type: "test.ping", timestamp: now.toISOString(), data: { endpointId, message: "A test event sent from the dashboard." } };
    const rows = await this.db.query<{ disabled: boolean; id: string | null }>(
      `WITH e AS (SELECT id, disabled_at IS NOT NULL AS disabled FROM webhook_endpoints WHERE id = $2 AND app_id = $3 AND environment = $4::"Environment"),
       ins AS (
         INSERT INTO webhook_deliveries (id, app_id, environment, endpoint_id, event_type, payload, event_key, next_attempt_at, created_at)
         SELECT $1, $3, $4::"Environment", e.id, 'test.ping', $5::jsonb, 'test.ping:' || $1, $6, $6 FROM e WHERE NOT e.disabled
         RETURNING id)
       SELECT e.disabled, (SELECT id FROM ins) AS id FROM e`,
      [id, endpointId, tenant.appId, tenant.environment, JSON.stringify(payload), now],
    );
    if (!rows[0]) throw new ApiError("not_found", `No webhook endpoint ${endpointId}.`);
    if (rows[0].disabled || !rows[0].id) throw new ApiError("endpoint_disabled", `Webhook endpoint ${endpointId} was removed: nothing is sent to it.`);
    await this.db.notify(WEBHOOK_DUE_CHANNEL, `${tenant.appId} ${tenant.environment}`);
    return { deliveryId: rows[0].id };
  }
}
