import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";

/**
 * Where the database tells every instance that a tenant's endpoints changed, whoever wrote them (the trigger
 * `webhook_endpoints_notify`, prisma/functions/webhook_endpoints_changed.sql). Payload: `<app id> <environment>`, or `*`.
 */
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
 * endpoint created, changed or deleted, by any instance or by hand, drops the
 * tenant's entry everywhere (the table's trigger notifies; the instance that
 * made the change drops it at once too), a lost notification connection drops
 * every entry, and an entry is read again after INTEREST_TTL_MS anyway.
 */
export class EndpointInterest {
  private readonly tenants = new Map<string, Interest>();
  private stop: (() => Promise<void>) | null = null;

  constructor(private readonly db: Database) {}

  async start(): Promise<void> {
    this.stop = await this.db.listen(
      WEBHOOK_ENDPOINTS_CHANNEL,
      (key) => (key === "*" ? this.tenants.clear() : this.tenants.delete(key)),
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

  /** A tenant's endpoints changed here: forgotten here at once (every instance hears it from the table's trigger a moment later). */
  changed(tenant: Tenant): void {
    this.tenants.delete(keyOf(tenant));
  }
}

const keyOf = (t: Tenant) => `${t.appId} ${t.environment}`;
