import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomToken } from "../crypto.js";

/** How long a Connect flow's `state` lives: an OAuth authorization, and an onboarding link's way back (onboarding takes longer, and its way back grants nothing). */
export const CONNECT_STATE_TTL_SECONDS = { oauth: 10 * 60, onboarding: 24 * 3600 } as const;
/** Connect flows one app and environment may have in flight (unused, unexpired states); more is 429. */
export const MAX_CONNECT_FLOWS = 20;

/** A Connect flow in flight, as its `state` row holds it. */
export interface ConnectFlow {
  app_id: string;
  environment: Tenant["environment"];
  mode: "oauth" | "onboarding";
  stripe_account_id: string | null;
  return_url: string | null;
}

/**
 * A Connect flow's `state`: random, stored only as its SHA-256, bound to the
 * app and environment, single-use, short-lived (CONNECT_STATE_TTL_SECONDS); at
 * most MAX_CONNECT_FLOWS in flight per app and environment.
 */
export class ConnectStates {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async limitFlows(tenant: Tenant, now: Date): Promise<void> {
    const open = await this.db.query<{ n: number; oldest: Date | null }>(
      `SELECT count(*)::int AS n, min(expires_at) AS oldest FROM billing_connect_states WHERE app_id = $1 AND environment = $2::"Environment" AND used_at IS NULL AND expires_at > $3`,
      [tenant.appId, tenant.environment, now],
    );
    if (open[0].n >= MAX_CONNECT_FLOWS) {
      const retryAfter = Math.max(1, Math.ceil((new Date(open[0].oldest!).getTime() - now.getTime()) / 1000));
      throw new ApiError("rate_limited", `${MAX_CONNECT_FLOWS} Stripe Connect flows of this app and environment are already in flight: finish one, or wait for one to expire.`, {
        headers: { "Retry-After": String(retryAfter) },
      });
    }
  }

  async newState(tenant: Tenant, mode: ConnectFlow["mode"], account: string | null, returnUrl: string | null, now: Date) {
    const state = `cst_${randomToken(32)}`;
    const hash = hashSecret(state);
    const expiresAt = new Date(now.getTime() + CONNECT_STATE_TTL_SECONDS[mode] * 1000);
    await this.db.query(
      `INSERT INTO billing_connect_states (id, app_id, environment, mode, stripe_account_id, return_url, created_at, expires_at) VALUES ($1, $2, $3::"Environment", $4, $5, $6, $7, $8)`,
      [hash, tenant.appId, tenant.environment, mode, account, returnUrl, now, expiresAt],
    );
    return { state, hash, expiresAt };
  }

  /**
   * Marks the state used, at most once; an unknown, used or expired state is 400 `invalid_state`, one answer for all three
   * (a spent state of another app must not tell its holder it was ever real: no existence oracle).
   */
  async consume(state: string): Promise<ConnectFlow> {
    const now = this.clock.now();
    const rows = await this.db.query<ConnectFlow>(
      `UPDATE billing_connect_states SET used_at = $2 WHERE id = $1 AND used_at IS NULL AND expires_at > $2 RETURNING app_id, environment, mode, stripe_account_id, return_url`,
      [hashSecret(state), now],
    );
    if (rows.length === 1) return rows[0];
    throw new ApiError("invalid_state", `This Stripe Connect state is unknown, expired or already used: start connecting again (POST /v1/billing/connect).`, { param: "state" });
  }
}
