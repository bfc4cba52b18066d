import { randomBytes } from "node:crypto";
import type { z } from "zod";
import { WEBHOOK_FACT_TYPES, type CreateWebhookEndpoint, type CreatedWebhookEndpoint, type WebhookEndpoint, type WebhookEventType } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import type { SecretSealer } from "./seal.js";
import type { EndpointInterest } from "./interest.js";
import { allowsPrivate, refuseLiteral, type PrivateAddressPolicy } from "./address-guard.js";

/** Endpoints one app and environment may have at once: plenty for fan-out, a bound on what one event costs. */
export const MAX_ENDPOINTS = 20;

interface EndpointRow {
  id: string;
  url: string;
  event_types: string[];
  created_at: Date;
  disabled_at: Date | null;
}

/**
 * Where an app wants its webhooks. The `whsec_` secret (24 random bytes, the
 * Standard Webhooks format) is shown once, at creation, and stored sealed; a
 * deleted endpoint is disabled, not erased, so its delivery log stays readable.
 * Every query names the app and the environment: another tenant's endpoint is
 * as unknown as a made-up id.
 */
export class WebhookEndpoints {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly sealer: SecretSealer,
    /** Told of each change, so facts reported anywhere see it. */
    private readonly interest: EndpointInterest,
    /** Which environments' endpoints may reach private addresses (`WEBHOOK_PRIVATE_ADDRESSES`). */
    private readonly privateAddresses: PrivateAddressPolicy = "none",
  ) {}

  async create(tenant: Tenant, body: z.infer<typeof CreateWebhookEndpoint>): Promise<z.infer<typeof CreatedWebhookEndpoint>> {
    const id = randomId("we_", 20);
    const secret = `whsec_${randomBytes(24).toString("base64")}`;
    const events: WebhookEventType[] = body.events ? [...new Set(body.events)] : [...WEBHOOK_FACT_TYPES];
    // The count and the insert are one statement: concurrent creates cannot pass the bound together by much.
    const rows = await this.db.query<EndpointRow>(
      `INSERT INTO webhook_endpoints (id, app_id, environment, url, secret, event_types, created_at)
       SELECT $1, $2, $3::"Environment", $4, $5, $6::text[], $7
        WHERE (SELECT count(*) FROM webhook_endpoints WHERE app_id = $2 AND environment = $3::"Environment" AND disabled_at IS NULL) < $8
       RETURNING id, url, event_types, created_at, disabled_at`,
      [id, tenant.appId, tenant.environment, body.url, this.sealer.seal(secret, id), events, this.clock.now(), MAX_ENDPOINTS],
    );
    if (!rows[0]) throw new ApiError("invalid_request", `An app may have ${MAX_ENDPOINTS} webhook endpoints per environment; delete one first.`, { param: "url" });
    this.interest.changed(tenant);
    return { ...this.view(tenant, rows[0]), secret };
  }

  async list(tenant: Tenant): Promise<z.infer<typeof WebhookEndpoint>[]> {
    const rows = await this.db.query<EndpointRow>(
      `SELECT id, url, event_types, created_at, disabled_at FROM webhook_endpoints
        WHERE app_id = $1 AND environment = $2::"Environment" ORDER BY created_at, id`,
      [tenant.appId, tenant.environment],
    );
    return rows.map((r) => this.view(tenant, r));
  }

  /**
   * Disables the endpoint and stops its pending deliveries (they end `failed`,
   * saying why), in one statement. Deleting it again answers the same.
   */
  async disable(tenant: Tenant, id: string): Promise<z.infer<typeof WebhookEndpoint>> {
    const rows = await this.db.query<EndpointRow>(
      `WITH e AS (
         UPDATE webhook_endpoints SET disabled_at = COALESCE(disabled_at, $4)
          WHERE id = $1 AND app_id = $2 AND environment = $3::"Environment"
          RETURNING id, url, event_types, created_at, disabled_at),
       stopped AS (
         UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, last_error = 'the endpoint was deleted'
          WHERE endpoint_id IN (SELECT id FROM e) AND status = 'pending' RETURNING 1)
       SELECT e.*, (SELECT count(*) FROM stopped)::int AS stopped FROM e`,
      [id, tenant.appId, tenant.environment, this.clock.now()],
    );
    if (!rows[0]) throw new ApiError("not_found", `No webhook endpoint ${id}.`);
    this.interest.changed(tenant);
    return this.view(tenant, rows[0]);
  }

  private view(tenant: Tenant, r: EndpointRow): z.infer<typeof WebhookEndpoint> {
    return {
      id: r.id,
      url: r.url,
      events: r.event_types as WebhookEventType[],
      createdAt: new Date(r.created_at).toISOString(),
      disabled: r.disabled_at !== null,
      warning: this.warning(tenant, r.url),
    };
  }

  /**
   * Why every delivery to `url` would be refused, with the setting that allows it: a
   * loopback or private address (a literal one, or `localhost`) where the operator's
   * `WEBHOOK_PRIVATE_ADDRESSES` does not let this environment reach one. A name that
   * resolves to a private address is only found at delivery (its answers may change).
   */
  private warning(tenant: Tenant, url: string): string | null {
    let host: string;
    try {
      host = new URL(url).hostname.toLowerCase();
    } catch {
      return null;
    }
    const local = host === "localhost" || host.endsWith(".localhost") || refuseLiteral(host) !== null;
    if (!local || allowsPrivate(this.privateAddresses, tenant.environment)) return null;
    return `${host} is a loopback or private address, and this service lets ${this.privateAddresses === "test" ? "only the test environment's" : "no"} webhooks reach one: every delivery will be refused. Use a public URL (a tunnel to your machine), or ask the service's operator to set WEBHOOK_PRIVATE_ADDRESSES (\`test\` for the test environment's endpoints, \`all\`); it is \`${this.privateAddresses}\`.`;
  }
}
