import Stripe from "stripe";
import type { z } from "zod";
import type { ConnectCallbackQuery, ConnectCallbackResult, ConnectLink, ConnectRequest, ConnectStart } from "@svc/contract";
import type { Tenant } from "../keys/keys.js";
import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import { ACCOUNT_REFRESH_SECONDS, ConnectedAccounts, statusOf, type AccountView, type StripeDeps } from "./connected-account.js";
import { ConnectStates, type ConnectFlow } from "./connect-states.js";

export type CallbackAnswer = { kind: "redirect"; location: string } | { kind: "result"; body: z.infer<typeof ConnectCallbackResult> };

const ACCOUNT_ID = /^acct_[A-Za-z0-9]{1,64}$/;

/**
 * The app's Stripe account, attached only through Stripe Connect, never by a
 * bare id (anyone can name any account):
 *
 * - OAuth, for an account that exists: the app owner's browser goes to Stripe's
 *   authorization page with a `state` (random, stored as its SHA-256, bound to
 *   the app and environment, single-use, ten minutes); Stripe sends it back to
 *   the callback with a code, which only the platform's secret key can exchange
 *   (`oauth.token`) for the account's id. That proves the account's owner
 *   authorized the platform, and only then is the account attached, or found to
 *   be another app's (409 `account_in_use`).
 * - An account the platform creates for the app (`accounts.create`): it is the
 *   app's from its creation; its owner onboards through an Account Link, and its
 *   state (charges, details, requirements) is read back from Stripe.
 */
export class StripeConnect {
  private readonly accounts: ConnectedAccounts;
  private readonly states: ConnectStates;

  constructor(private readonly deps: StripeDeps) {
    this.accounts = new ConnectedAccounts(deps);
    this.states = new ConnectStates(deps.db, deps.clock);
  }

  get callbackUrl(): string {
    return `${this.deps.urls.base}/v1/billing/connect/callback`;
  }

  /** The environment's account id, or null. */
  async accountId(tenant: Tenant): Promise<string | null> {
    return (await this.accounts.row(tenant))?.stripe_account_id ?? null;
  }

  /** Checkout needs an account that can take charges: false only when Stripe said so (a created account still onboarding, a disabled one). */
  async chargeableAccount(tenant: Tenant): Promise<{ id: string; chargesEnabled: boolean | null } | null> {
    const row = await this.accounts.row(tenant);
    return row ? { id: row.stripe_account_id, chargesEnabled: row.charges_enabled } : null;
  }

  /** The account and its state; asks Stripe again when what is known is older than ACCOUNT_REFRESH_SECONDS (a failure there is logged and the stored state answered). */
  async view(tenant: Tenant, opts: { refresh?: boolean } = {}): Promise<AccountView> {
    let row = await this.accounts.row(tenant);
    const now = this.deps.clock.now();
    if (row && opts.refresh && this.deps.stripe && (!row.checked_at || now.getTime() - row.checked_at.getTime() > ACCOUNT_REFRESH_SECONDS * 1000)) {
      const status = await this.accounts.retrieve(row.stripe_account_id);
      if (status) {
        await this.accounts.storeStatus(row.stripe_account_id, tenant, status);
        row = await this.accounts.row(tenant);
      }
    }
    return this.accounts.toView(tenant, row);
  }

  /** Starts a Connect flow: the URL to send the app owner's browser to. */
  async start(tenant: Tenant, request: z.infer<typeof ConnectRequest>): Promise<z.infer<typeof ConnectStart>> {
    const returnUrl = request.returnUrl === undefined ? null : httpUrl(request.returnUrl);
    const stripe = this.deps.stripe;
    if (!stripe) throw new ApiError("not_configured", "Connecting a Stripe account is not available: this service's operator has not configured Stripe (STRIPE_SECRET_KEY); retrying will not help.");
    if (request.mode === "oauth" && !stripe.clientId) {
      throw new ApiError(
        "not_configured",
        "Stripe Connect OAuth is not configured on this service (its operator sets STRIPE_CONNECT_CLIENT_ID): connect an existing account later, or use `mode: \"create\"` for an account the platform creates.",
      );
    }
    if (stripe.livemode !== (tenant.environment === "live")) {
      // Events name their environment by `livemode`, the platform key's mode: an account connected across modes would never receive its events.
      throw new ApiError(
        "service_unavailable",
        `The ${tenant.environment} environment cannot connect a Stripe account on this service: its platform key (STRIPE_SECRET_KEY) is a ${stripe.livemode ? "live" : "test"} key.`,
      );
    }
    const now = this.deps.clock.now();
    await this.deps.db.query(`DELETE FROM billing_connect_states WHERE expires_at <= $1`, [now]);
    if (request.mode === "create") {
      // A new onboarding link supersedes the earlier ones' ways back (deleted, so repeated starts keep one row).
      await this.deps.db.query(`DELETE FROM billing_connect_states WHERE app_id = $1 AND environment = $2::"Environment" AND mode = 'onboarding'`, [tenant.appId, tenant.environment]);
    }
    await this.states.limitFlows(tenant, now);

    if (request.mode === "oauth") {
      const { state, expiresAt } = await this.states.newState(tenant, "oauth", null, returnUrl, now);
      const query = new URLSearchParams({ response_type: "code", client_id: stripe.clientId!, scope: "read_write", redirect_uri: this.callbackUrl, state });
      return { mode: "oauth", url: `${stripe.connectUrl}/oauth/authorize?${query}`, expiresAt: expiresAt.toISOString(), stripeAccountId: null };
    }

    const current = await this.accounts.row(tenant);
    const account = current?.connected_via === "created" ? current.stripe_account_id : await this.createAccount(tenant);
    const { state, hash, expiresAt } = await this.states.newState(tenant, "onboarding", account, returnUrl, now);
    try {
      const link = await stripe.api.accountLinks.create({
        account,
        type: "account_onboarding",
        refresh_url: this.flowUrl(state, "refresh"),
        return_url: this.flowUrl(state, "return"),
      });
      return { mode: "create", url: link.url, expiresAt: expiresAt.toISOString(), stripeAccountId: account };
    } catch (err) {
      await this.deps.db.query(`DELETE FROM billing_connect_states WHERE id = $1`, [hash]);
      throw stripeTrouble(err, "an onboarding link", this.deps.logger);
    }
  }

  /**
   * Stripe's way back. The state authenticates it (it is consumed first, so a
   * replay finds it used); what it leads to is answered as a redirect to the
   * flow's `returnUrl`, or as JSON (errors in the envelope) without one.
   */
  async callback(query: z.infer<typeof ConnectCallbackQuery>): Promise<CallbackAnswer> {
    if (!query.state) throw new ApiError("invalid_state", "The callback carries no `state`: it must come from Stripe, in a flow started with POST /v1/billing/connect.", { param: "state" });
    const flow = await this.states.consume(query.state);
    const tenant: Tenant = { appId: flow.app_id, environment: flow.environment };
    try {
      if (flow.mode === "onboarding") {
        if (query.link === "refresh") return { kind: "redirect", location: await this.refreshLink(tenant, flow) };
        const view = await this.onboardingReturn(tenant, flow);
        const outcome = view.detailsSubmitted && view.chargesEnabled !== false ? "connected" : "onboarding";
        return this.finish(flow, { outcome, account: view });
      }
      const view = await this.finishOAuth(tenant, query);
      return this.finish(flow, { outcome: "connected", account: view });
    } catch (err) {
      if (err instanceof ApiError && flow.return_url) {
        return { kind: "redirect", location: withQuery(flow.return_url, { stripe_connect: "error", code: err.code }) };
      }
      throw err;
    }
  }

  /**
   * Detaches the environment's account. One connected through OAuth is
   * deauthorized at Stripe first (the platform's access ends; Stripe then sends
   * `account.application.deauthorized`, which finds nothing left to detach);
   * Stripe unreachable is 503 and nothing changes. A created account stays its
   * owner's. Without an account: the same empty answer.
   */
  async disconnect(tenant: Tenant): Promise<AccountView> {
    const row = await this.accounts.row(tenant);
    if (!row) return this.accounts.toView(tenant, null);
    if (row.connected_via === "oauth") {
      if (this.deps.stripe?.clientId) {
        try {
          await this.deps.stripe.connect.oauth.deauthorize({ client_id: this.deps.stripe.clientId, stripe_user_id: row.stripe_account_id });
        } catch (err) {
          // Already disconnected at Stripe (its owner revoked the platform): nothing left to revoke.
          const revokedAlready = err instanceof Stripe.errors.StripeInvalidClientError && (err.statusCode ?? 500) < 500;
          if (!revokedAlready) throw stripeTrouble(err, "a deauthorization", this.deps.logger);
        }
      } else {
        this.deps.logger.warn({ app: tenant.appId, environment: tenant.environment }, "Stripe account detached without deauthorizing it: STRIPE_CONNECT_CLIENT_ID is not configured");
      }
    }
    await this.deps.db.query(`DELETE FROM billing_accounts WHERE app_id = $1 AND environment = $2::"Environment" AND stripe_account_id = $3`, [
      tenant.appId,
      tenant.environment,
      row.stripe_account_id,
    ]);
    this.deps.logger.info({ app: tenant.appId, environment: tenant.environment, stripeAccount: row.stripe_account_id, connectedVia: row.connected_via }, "Stripe account disconnected");
    return this.accounts.toView(tenant, null);
  }

  // --- the flows ---

  private async finishOAuth(tenant: Tenant, query: z.infer<typeof ConnectCallbackQuery>): Promise<AccountView> {
    if (query.error) {
      const said = query.error_description ? `: ${query.error_description.slice(0, 300)}` : "";
      throw new ApiError(
        "connect_denied",
        query.error === "access_denied" ? `The Stripe account's owner declined to connect it${said}.` : `Stripe ended the authorization with \`${query.error.slice(0, 100)}\`${said}.`,
      );
    }
    if (!query.code) throw new ApiError("invalid_request", "The callback carries neither an authorization `code` nor an `error`.", { param: "code" });
    const stripe = this.deps.stripe;
    if (!stripe) throw new ApiError("not_configured", "Stripe is not configured on this service: its operator has not set STRIPE_SECRET_KEY; retrying will not help.");
    let account: string | undefined;
    try {
      const token = await stripe.connect.oauth.token({ grant_type: "authorization_code", code: query.code });
      account = token.stripe_user_id;
    } catch (err) {
      // Stripe's OAuth errors come as `{error, error_description}` whatever the status: only a 4xx is a refusal of the code.
      if (err instanceof Stripe.errors.StripeOAuthError && (err.statusCode ?? 500) < 500) {
        this.deps.logger.warn({ stripeError: { type: err.type, statusCode: err.statusCode } }, "Stripe refused an OAuth authorization code");
        throw new ApiError("connect_failed", `Stripe refused the authorization code: ${err.message ?? err.type}. Start connecting again.`);
      }
      throw stripeTrouble(err, "the authorization code's exchange", this.deps.logger);
    }
    if (!account || !ACCOUNT_ID.test(account)) throw new ApiError("connect_failed", "Stripe's answer named no account.");
    // Verified: the account's owner authorized the platform. Its state is read now; failing that, it is read later.
    const status = await this.accounts.retrieve(account);
    await this.accounts.attach(tenant, account, "oauth", status);
    return this.accounts.toView(tenant, await this.accounts.row(tenant));
  }

  private async onboardingReturn(tenant: Tenant, flow: ConnectFlow): Promise<AccountView> {
    const row = await this.accounts.row(tenant);
    if (!row || row.stripe_account_id !== flow.stripe_account_id) {
      throw new ApiError("billing_not_connected", "The account this onboarding was for is no longer the app's (it was disconnected or replaced).");
    }
    const status = await this.accounts.retrieve(row.stripe_account_id);
    if (status) await this.accounts.storeStatus(row.stripe_account_id, tenant, status);
    return this.accounts.toView(tenant, await this.accounts.row(tenant));
  }

  /** The onboarding link expired or was used: a fresh one, with a fresh state. */
  private async refreshLink(tenant: Tenant, flow: ConnectFlow): Promise<string> {
    const row = await this.accounts.row(tenant);
    if (!row || row.stripe_account_id !== flow.stripe_account_id) {
      throw new ApiError("billing_not_connected", "The account this onboarding was for is no longer the app's (it was disconnected or replaced).");
    }
    const start = await this.start(tenant, { mode: "create", ...(flow.return_url ? { returnUrl: flow.return_url } : {}) });
    return start.url;
  }

  private finish(flow: ConnectFlow, body: z.infer<typeof ConnectCallbackResult>): CallbackAnswer {
    if (flow.return_url) return { kind: "redirect", location: withQuery(flow.return_url, { stripe_connect: body.outcome }) };
    return { kind: "result", body };
  }

  private async createAccount(tenant: Tenant): Promise<string> {
    const stripe = this.deps.stripe!;
    let created: Stripe.Account;
    try {
      created = await stripe.api.accounts.create({ type: "standard", metadata: { svc_app: tenant.appId, svc_environment: tenant.environment } });
    } catch (err) {
      throw stripeTrouble(err, "an account", this.deps.logger);
    }
    if (!ACCOUNT_ID.test(created.id)) throw new ApiError("service_unavailable", "Stripe created an account without a usable id.");
    // The platform created it for this app: it is the app's by construction.
    await this.accounts.attach(tenant, created.id, "created", statusOf(created as unknown as Record<string, unknown>));
    this.deps.logger.info({ app: tenant.appId, environment: tenant.environment, stripeAccount: created.id }, "Stripe account created for the app");
    return created.id;
  }

  private flowUrl(state: string, link: ConnectLink): string {
    return withQuery(this.callbackUrl, { state, link });
  }
}

/** A `returnUrl` the browser may be sent to: http or https only. */
export function httpUrl(value: string): string {
  const url = new URL(value);
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new ApiError("invalid_request", "`returnUrl` must be an http or https URL.", { param: "returnUrl" });
  }
  return url.toString();
}

export function withQuery(base: string, params: Record<string, string>): string {
  const url = new URL(base);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  return url.toString();
}

/** Stripe refusing or unreachable while connecting: a refusal says why (409-free: the app cannot fix Stripe's side), anything else is 503. */
function stripeTrouble(err: unknown, what: string, logger: Logger): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { type?: string; code?: string; statusCode?: number; message?: string };
  logger.warn({ stripeError: { type: e.type, code: e.code, statusCode: e.statusCode } }, `Stripe failed to make ${what}`);
  if (e.type === "StripeInvalidRequestError" || e.type === "StripePermissionError" || e.type === "StripeAuthenticationError") {
    return new ApiError("service_unavailable", `Stripe refused to make ${what}: ${e.message ?? "refused"}.`);
  }
  return new ApiError("service_unavailable", `Stripe could not be reached to make ${what}; try again in a moment.`);
}
