import type { z } from "zod";
import type { BillingAccount, ConnectedVia } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { PublicUrls } from "../public-urls.js";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import type { StripeClients } from "./stripe-client.js";

/** What the app's Stripe account is kept and connected with: the database, the clock, the service's public URLs, the platform's Stripe clients (null: Stripe is not configured), the log. */
export interface StripeDeps {
  db: Database;
  clock: Clock;
  urls: PublicUrls;
  stripe: StripeClients | null;
  logger: Logger;
}

/** `GET /v1/billing/account` asks Stripe again when what it knows of the account is older than this. */
export const ACCOUNT_REFRESH_SECONDS = 30;

export type AccountView = z.infer<typeof BillingAccount>;

export interface AccountRow {
  stripe_account_id: string;
  connected_via: ConnectedVia;
  connected_at: Date;
  charges_enabled: boolean | null;
  details_submitted: boolean | null;
  payouts_enabled: boolean | null;
  requirements: Requirements | null;
  checked_at: Date | null;
}
interface Requirements {
  currentlyDue: string[];
  pastDue: string[];
  disabledReason: string | null;
}
/** What Stripe says of an account (an Account object, from the API or an `account.updated` event). */
export interface AccountStatus {
  chargesEnabled: boolean | null;
  detailsSubmitted: boolean | null;
  payoutsEnabled: boolean | null;
  requirements: Requirements | null;
}

/**
 * The app's Stripe account as this service knows it: its row in
 * `billing_accounts` (one per app and environment), what Stripe says of it
 * (read from Stripe's API, or from an `account.updated` event), and attaching a
 * verified one. How an account comes to be verified is the Connect flow's
 * (connect.ts).
 */
export class ConnectedAccounts {
  constructor(private readonly deps: StripeDeps) {}

  get webhookUrl(): string {
    return `${this.deps.urls.base}/v1/stripe/webhook`;
  }

  /**
   * Attaches a verified account (replacing the environment's previous one).
   * Another app holding it through Connect keeps it: 409 `account_in_use`. One
   * holding it only by a bare id from before Connect (`legacy`, never verified)
   * loses it to this verified connection.
   */
  async attach(tenant: Tenant, account: string, via: Exclude<ConnectedVia, "legacy">, status: AccountStatus | null): Promise<void> {
    const now = this.deps.clock.now();
    const refused = () =>
      new ApiError("account_in_use", `The Stripe account ${account} is connected to another app in the ${tenant.environment} environment: its owner can disconnect it there, or revoke the platform's access in the Stripe dashboard, and connect it again here.`);
    try {
      await this.deps.db.prisma.$transaction(async (tx) => {
        const held = await tx.$queryRawUnsafe<{ app_id: string; connected_via: string }[]>(
          `SELECT app_id, connected_via FROM billing_accounts WHERE stripe_account_id = $1 AND environment = $2::"Environment" FOR UPDATE`,
          account,
          tenant.environment,
        );
        const other = held.find((h) => h.app_id !== tenant.appId);
        if (other && other.connected_via !== "legacy") throw refused();
        if (other) {
          await tx.$executeRawUnsafe(`DELETE FROM billing_accounts WHERE app_id = $1 AND environment = $2::"Environment"`, other.app_id, tenant.environment);
          this.deps.logger.warn({ app: other.app_id, environment: tenant.environment, stripeAccount: account, to: tenant.appId }, "unverified (legacy) Stripe account attachment displaced by a verified Connect connection");
        }
        await tx.$executeRawUnsafe(
          `INSERT INTO billing_accounts (app_id, environment, stripe_account_id, connected_via, connected_at, charges_enabled, details_submitted, payouts_enabled, requirements, checked_at, created_at)
           VALUES ($1, $2::"Environment", $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $5)
           ON CONFLICT (app_id, environment) DO UPDATE SET stripe_account_id = EXCLUDED.stripe_account_id, connected_via = EXCLUDED.connected_via,
             connected_at = EXCLUDED.connected_at, charges_enabled = EXCLUDED.charges_enabled, details_submitted = EXCLUDED.details_submitted,
             payouts_enabled = EXCLUDED.payouts_enabled, requirements = EXCLUDED.requirements, checked_at = EXCLUDED.checked_at`,
          tenant.appId,
          tenant.environment,
          account,
          via,
          now,
          status?.chargesEnabled ?? null,
          status?.detailsSubmitted ?? null,
          status?.payoutsEnabled ?? null,
          status?.requirements ? JSON.stringify(status.requirements) : null,
          status ? now : null,
        );
      });
    } catch (err) {
      // Another app attached it between the check and the write: the unique index decides.
      if (isUniqueViolation(err)) throw refused();
      throw err;
    }
    this.deps.logger.info({ app: tenant.appId, environment: tenant.environment, stripeAccount: account, connectedVia: via }, "Stripe account connected");
  }

  async retrieve(account: string): Promise<AccountStatus | null> {
    if (!this.deps.stripe) return null;
    try {
      return statusOf((await this.deps.stripe.api.accounts.retrieve(account)) as unknown as Record<string, unknown>);
    } catch (err) {
      const e = err as { type?: string; statusCode?: number };
      this.deps.logger.warn({ stripeAccount: account, stripeError: { type: e.type, statusCode: e.statusCode } }, "Stripe did not describe the connected account");
      return null;
    }
  }

  async storeStatus(account: string, tenant: Tenant, status: AccountStatus): Promise<void> {
    await this.deps.db.query(
      `UPDATE billing_accounts SET charges_enabled = $4, details_submitted = $5, payouts_enabled = $6, requirements = $7::jsonb, checked_at = $8
       WHERE app_id = $1 AND environment = $2::"Environment" AND stripe_account_id = $3`,
      [
        tenant.appId,
        tenant.environment,
        account,
        status.chargesEnabled,
        status.detailsSubmitted,
        status.payoutsEnabled,
        status.requirements ? JSON.stringify(status.requirements) : null,
        this.deps.clock.now(),
      ],
    );
  }

  async row(tenant: Tenant): Promise<AccountRow | null> {
    const rows = await this.deps.db.query<AccountRow>(
      `SELECT stripe_account_id, connected_via, connected_at, charges_enabled, details_submitted, payouts_enabled, requirements, checked_at
       FROM billing_accounts WHERE app_id = $1 AND environment = $2::"Environment"`,
      [tenant.appId, tenant.environment],
    );
    return rows[0] ?? null;
  }

  toView(tenant: Tenant, row: AccountRow | null): AccountView {
    const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());
    return {
      environment: tenant.environment,
      stripeAccountId: row?.stripe_account_id ?? null,
      connectedVia: row?.connected_via ?? null,
      connectedAt: iso(row?.connected_at ?? null),
      chargesEnabled: row?.charges_enabled ?? null,
      detailsSubmitted: row?.details_submitted ?? null,
      payoutsEnabled: row?.payouts_enabled ?? null,
      requirements: row?.requirements ? (typeof row.requirements === "string" ? JSON.parse(row.requirements) : row.requirements) : null,
      checkedAt: iso(row?.checked_at ?? null),
      webhookUrl: this.webhookUrl,
    };
  }
}

/** An Account object's state, field by field (it is input). */
export function statusOf(account: Record<string, unknown>): AccountStatus {
  const bool = (v: unknown) => (typeof v === "boolean" ? v : null);
  const strings = (v: unknown) => (Array.isArray(v) ? v.filter((s): s is string => typeof s === "string").slice(0, 200) : []);
  const req = account.requirements && typeof account.requirements === "object" ? (account.requirements as Record<string, unknown>) : null;
  return {
    chargesEnabled: bool(account.charges_enabled),
    detailsSubmitted: bool(account.details_submitted),
    payoutsEnabled: bool(account.payouts_enabled),
    requirements: req
      ? { currentlyDue: strings(req.currently_due), pastDue: strings(req.past_due), disabledReason: typeof req.disabled_reason === "string" ? req.disabled_reason : null }
      : null,
  };
}

function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; meta?: { code?: string }; message?: string };
  return e.code === "23505" || e.meta?.code === "23505" || /23505|unique constraint/i.test(e.message ?? "");
}
