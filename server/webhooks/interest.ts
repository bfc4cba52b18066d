import type { Database } from "../db/open.js";
import type { Logger } from "../logger.js";
import type { Tenant } from "../keys/keys.js";

/** Tells every instance that a tenant's endpoints changed (payload: `<app id> <environment>`). */
export const WEBHOOK_ENDPOINTS_CHANNEL = "svc_webhook_endpoints";
/** How long a tenant's interest is trusted without a change heard: a lost notification costs at most this. */
const INTEREST_TTL_MS = 30_000;
/** The tenants remembered at once (the oldest read is forgotten first). */
const MAX_TENANTS = 10_000;

interface Interest {
  types: Promise<Set<string>>;
  at: number;
}

/**
 * Which event types some live endpoint of a tenant wants, read once and kept:
 * a fact nobody wants (most runs' `run.finished`) costs no statement. An
 * endpoint created, changed or deleted on any instance drops the tenant's entry
 * everywhere (a notification; here at once), a lost notification connection
 * drops every entry, and an entry is read again after INTEREST_TTL_MS anyway.
 */
export class EndpointInterest {
  private readonly tenants = new Map<string, Interest>();
  private stop: (() => Promise<void>) | null = null;

  constructor(
    private readonly db: Database,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.stop = await this.db.listen(
      WEBHOOK_ENDPOINTS_CHANNEL,
      (key) => this.tenants.delete(key),
      () => this.tenants.clear(),
    );
  }

  async close(): Promise<void> {
    await this.stop?.();
    this.stop = null;
  }

  async wants(tenant: Tenant, type: string): Promise<boolean> {
    const key = keyOf(tenant);
    let entry = this.tenants.get(key);
    if (!entry || Date.now() - entry.at > INTEREST_TTL_MS) {
      const read = this.db.query<{ t: string }>(
        `SELECT DISTINCT unnest(event_types) AS t FROM webhook_endpoints WHERE app_id = $1 AND environment = $2::"Environment" AND disabled_at IS NULL`,
        [tenant.appId, tenant.environment],
        { prepared: true },
      );
      const made: Interest = (entry = { types: read.then((rows) => new Set(rows.map((r) => r.t))), at: Date.now() });
      this.tenants.delete(key);
      this.tenants.set(key, made);
      if (this.tenants.size > MAX_TENANTS) this.tenants.delete(this.tenants.keys().next().value!);
      // A failed read is not kept: the next fact reads again.
      made.types.catch(() => this.tenants.get(key) === made && this.tenants.delete(key));
    }
    return (await entry.types).has(type);
  }

  /** A tenant's endpoints changed here: forgotten at once here, and on every other instance by notification. */
  async changed(tenant: Tenant): Promise<void> {
    const key = keyOf(tenant);
    this.tenants.delete(key);
    await this.db.notify(WEBHOOK_ENDPOINTS_CHANNEL, key).catch((err) => this.log.warn({ err }, "could not tell other instances of a webhook endpoint change"));
  }
}

const keyOf = (t: Tenant) => `${t.appId} ${t.environment}`;
