import http from "node:http";
import { randomBytes } from "node:crypto";
import type { AddressInfo } from "node:net";
import Stripe from "stripe";

/**
 * A local stand-in for the few Stripe endpoints the service calls, speaking
 * Stripe's wire format: form-encoded requests (`metadata[svc_user]=...`), JSON
 * answers, the `Stripe-Account` header of Connect. The real `stripe` library is
 * pointed at it with STRIPE_API_URL. A Checkout Session's and a customer
 * portal session's `url` are tiny pages on the stand-in, so a browser test can
 * land on "Stripe".
 *
 * Like Stripe, it has two hosts: the API (`url`, api.stripe.com: checkout,
 * portal, `/v1/accounts`, `/v1/account_links`) and Connect (`connectUrl`,
 * connect.stripe.com: the OAuth authorization page, `/oauth/token`,
 * `/oauth/deauthorize`, the onboarding pages). Each refuses the other's paths,
 * so a call sent to the wrong host fails as it would at Stripe.
 */

export interface RecordedCheckout {
  /** The `Stripe-Account` header: the connected account the session was created in. */
  stripeAccount: string | null;
  /** Every form field, flat, as sent (`line_items[0][price]`, `metadata[svc_user]`, ...). */
  fields: Record<string, string>;
  session: Record<string, unknown>;
}

export interface RecordedPortal {
  /** The `Stripe-Account` header: the connected account the portal session was created in. */
  stripeAccount: string | null;
  /** Every form field, flat, as sent (`customer`, `return_url`, ...). */
  fields: Record<string, string>;
  session: Record<string, unknown>;
}

/** The platform's Connect client id the stand-in knows (STRIPE_CONNECT_CLIENT_ID). */
export const STANDIN_CLIENT_ID = "ca_standinPlatform0123";

export interface StandInAccount {
  id: string;
  /** Connected to the platform (through OAuth, or created by it); deauthorizing ends it. */
  connected: boolean;
  createdByPlatform: boolean;
  object: Record<string, unknown>;
}

export interface StripeStandIn {
  /** The API host (STRIPE_API_URL). */
  url: string;
  /** The Connect host (STRIPE_CONNECT_URL). */
  connectUrl: string;
  checkouts: RecordedCheckout[];
  portals: RecordedPortal[];
  /** Every Stripe account the stand-in knows, by id. */
  accounts: Map<string, StandInAccount>;
  /** Every authorization page opened: its query as sent. */
  authorizations: Record<string, string>[];
  /** Every `/oauth/token` call: its form fields and the account it named (null: refused). */
  tokenExchanges: { fields: Record<string, string>; account: string | null }[];
  /** Every `/oauth/deauthorize` call's form fields. */
  deauthorizations: Record<string, string>[];
  /** Every `/v1/accounts` creation's form fields, and every account link made. */
  accountCreations: Record<string, string>[];
  accountLinks: { fields: Record<string, string>; link: Record<string, unknown> }[];
  /**
   * Who is signed in to Stripe on the authorization page, and what they answer: they approve with their account
   * (an existing, activated one unless known) or deny. Default: ACCOUNT's owner approves.
   */
  signIn(account: string, answer?: "approve" | "deny"): void;
  /** The onboarding pages complete the account's details (default) or leave them unfinished. */
  onboarding: "complete" | "leave";
  /** The next `times` requests to `path` (default: checkout and portal sessions) answer this error instead (the library retries a 5xx once). OAuth paths get it as Stripe's OAuth error body, `{error, error_description}`. */
  failNext(status: number, error: Record<string, unknown>, times?: number, path?: string): void;
  close(): Promise<void>;
}

export async function startStripeStandIn(): Promise<StripeStandIn> {
  const checkouts: RecordedCheckout[] = [];
  const portals: RecordedPortal[] = [];
  const accounts = new Map<string, StandInAccount>();
  const authorizations: Record<string, string>[] = [];
  const tokenExchanges: StripeStandIn["tokenExchanges"] = [];
  const deauthorizations: Record<string, string>[] = [];
  const accountCreations: Record<string, string>[] = [];
  const accountLinks: StripeStandIn["accountLinks"] = [];
  /** Authorization codes issued by the authorization page: single-use, for one account. */
  const codes = new Map<string, { account: string; used: boolean }>();
  /** Onboarding links: the account and where to go back. */
  const links = new Map<string, { account: string; returnUrl: string; refreshUrl: string }>();
  let signedIn = { account: "acct_1AppConnected", answer: "approve" as "approve" | "deny" };
  const failures: { path: string | null; status: number; error: Record<string, unknown>; times: number }[] = [];
  const standIn = { onboarding: "complete" as "complete" | "leave" };

  const knowAccount = (id: string, opts: { createdByPlatform: boolean; activated: boolean; metadata?: Record<string, string> }): StandInAccount => {
    const existing = accounts.get(id);
    if (existing) return existing;
    const account: StandInAccount = { id, connected: false, createdByPlatform: opts.createdByPlatform, object: accountObject(id, opts.activated, opts.metadata ?? {}) };
    accounts.set(id, account);
    return account;
  };
  const authorized = (req: http.IncomingMessage) => /^Bearer sk_test_/.test(req.headers.authorization ?? "");
  const failureFor = (pathname: string) => {
    const i = failures.findIndex((f) => (f.path === null ? pathname === "/v1/checkout/sessions" || pathname === "/v1/billing_portal/sessions" : f.path === pathname));
    if (i < 0) return null;
    const f = failures[i];
    if (--f.times <= 0) failures.splice(i, 1);
    return f;
  };

  const api = async (req: http.IncomingMessage, res: http.ServerResponse, url: URL, body: string) => {
    if (url.pathname.startsWith("/oauth/") || url.pathname.startsWith("/setup/")) return notFound(res, req, url);
    if (req.method === "POST" || url.pathname.startsWith("/v1/accounts")) {
      if (!authorized(req)) return json(res, { error: { type: "invalid_request_error", message: "Invalid API Key provided" } }, 401);
      const f = failureFor(url.pathname);
      if (f) return json(res, { error: f.error }, f.status);
    }
    const stripeAccount = (req.headers["stripe-account"] as string | undefined) ?? null;
    const fields = Object.fromEntries(new URLSearchParams(body));
    if (req.method === "POST" && url.pathname === "/v1/billing_portal/sessions") {
      if (!fields.customer) return json(res, { error: { type: "invalid_request_error", message: "Missing required param: customer.", param: "customer" } }, 400);
      const id = `bps_${randomBytes(12).toString("hex")}`;
      const session = {
        id,
        object: "billing_portal.session",
        customer: fields.customer,
        return_url: fields.return_url ?? null,
        livemode: false,
        created: Math.floor(Date.now() / 1000),
        url: `${base}/portal/${id}`,
      };
      portals.push({ stripeAccount, fields, session });
      return json(res, session);
    }
    if (req.method === "POST" && url.pathname === "/v1/checkout/sessions") {
      const id = `cs_test_${randomBytes(12).toString("hex")}`;
      const session = {
        id,
        object: "checkout.session",
        mode: fields.mode,
        status: "open",
        payment_status: "unpaid",
        client_reference_id: fields.client_reference_id ?? null,
        customer: null,
        subscription: null,
        metadata: nested(fields, "metadata"),
        success_url: fields.success_url,
        cancel_url: fields.cancel_url,
        livemode: false,
        created: Math.floor(Date.now() / 1000),
        url: `${base}/pay/${id}`,
      };
      checkouts.push({ stripeAccount, fields, session });
      return json(res, session);
    }
    if (req.method === "POST" && url.pathname === "/v1/accounts") {
      accountCreations.push(fields);
      if (fields.type !== "standard" && fields.type !== "express" && fields.type !== "custom" && !fields["controller[stripe_dashboard][type]"]) {
        return json(res, { error: { type: "invalid_request_error", message: "You must specify `type` or `controller`.", param: "type" } }, 400);
      }
      const account = knowAccount(`acct_${randomBytes(8).toString("hex")}`, { createdByPlatform: true, activated: false, metadata: nested(fields, "metadata") });
      account.connected = true;
      return json(res, account.object);
    }
    const one = /^\/v1\/accounts\/([^/]+)$/.exec(url.pathname);
    if (req.method === "GET" && one) {
      const account = accounts.get(decodeURIComponent(one[1]));
      if (!account || !account.connected) {
        return json(
          res,
          { error: { type: "invalid_request_error", code: "account_invalid", message: `The provided key 'sk_test_*****' does not have access to account '${one[1]}' (or that account does not exist). Application access may have been revoked.` } },
          403,
        );
      }
      return json(res, account.object);
    }
    if (req.method === "POST" && url.pathname === "/v1/account_links") {
      const account = accounts.get(fields.account ?? "");
      if (!account || !account.connected) return json(res, { error: { type: "invalid_request_error", code: "account_invalid", message: `No such account: '${fields.account}'`, param: "account" } }, 400);
      for (const param of ["refresh_url", "return_url", "type"]) {
        if (!fields[param]) return json(res, { error: { type: "invalid_request_error", message: `Missing required param: ${param}.`, param } }, 400);
      }
      const id = randomBytes(12).toString("hex");
      links.set(id, { account: account.id, returnUrl: fields.return_url, refreshUrl: fields.refresh_url });
      const created = Math.floor(Date.now() / 1000);
      const link = { object: "account_link", created, expires_at: created + 300, url: `${connectBase}/setup/s/${id}` };
      accountLinks.push({ fields, link });
      return json(res, link);
    }
    const pay = /^\/pay\/(cs_test_\w+)$/.exec(url.pathname);
    if (req.method === "GET" && pay) {
      const known = checkouts.find((c) => c.session.id === pay[1]);
      res.writeHead(known ? 200 : 404, { "content-type": "text/html; charset=utf-8" });
      return res.end(`<!doctype html><title>Stripe stand-in</title><h1 id="pay">Pay for ${known ? pay[1] : "nothing"}</h1>`);
    }
    const portal = /^\/portal\/(bps_\w+)$/.exec(url.pathname);
    if (req.method === "GET" && portal) {
      const known = portals.find((p) => p.session.id === portal[1]);
      res.writeHead(known ? 200 : 404, { "content-type": "text/html; charset=utf-8" });
      return res.end(`<!doctype html><title>Stripe stand-in</title><h1 id="portal">Portal for ${known ? String(known.session.customer) : "nobody"}</h1>`);
    }
    return notFound(res, req, url);
  };

  const connect = async (req: http.IncomingMessage, res: http.ServerResponse, url: URL, body: string) => {
    const fields = Object.fromEntries(new URLSearchParams(body));
    if (req.method === "GET" && url.pathname === "/oauth/authorize") {
      const q = Object.fromEntries(url.searchParams);
      authorizations.push(q);
      if (q.client_id !== STANDIN_CLIENT_ID || q.response_type !== "code" || !q.redirect_uri) {
        res.writeHead(400, { "content-type": "text/html; charset=utf-8" });
        return res.end(`<!doctype html><title>Stripe stand-in</title><h1>Invalid OAuth request</h1>`);
      }
      const back = new URL(q.redirect_uri);
      if (signedIn.answer === "deny") {
        back.searchParams.set("error", "access_denied");
        back.searchParams.set("error_description", "The user denied your request");
      } else {
        knowAccount(signedIn.account, { createdByPlatform: false, activated: true });
        const code = `ac_${randomBytes(12).toString("hex")}`;
        codes.set(code, { account: signedIn.account, used: false });
        back.searchParams.set("scope", q.scope ?? "read_only");
        back.searchParams.set("code", code);
      }
      if (q.state !== undefined) back.searchParams.set("state", q.state);
      res.writeHead(302, { location: back.toString() });
      return res.end();
    }
    if (req.method === "POST" && (url.pathname === "/oauth/token" || url.pathname === "/oauth/deauthorize")) {
      if (!authorized(req)) return json(res, { error: "invalid_request", error_description: "Invalid API Key provided" }, 401);
      const f = failureFor(url.pathname);
      if (f) return json(res, f.error, f.status);
      if (url.pathname === "/oauth/token") {
        if (fields.grant_type !== "authorization_code") return json(res, { error: "unsupported_grant_type", error_description: `Unsupported grant type: ${fields.grant_type}` }, 400);
        const code = codes.get(fields.code ?? "");
        if (!code || code.used) {
          tokenExchanges.push({ fields, account: null });
          return json(res, { error: "invalid_grant", error_description: code ? `This authorization code has already been used. All tokens issued with this code have been revoked.` : `Authorization code does not exist: ${fields.code}` }, 400);
        }
        code.used = true;
        const account = accounts.get(code.account)!;
        account.connected = true;
        tokenExchanges.push({ fields, account: account.id });
        return json(res, {
          access_token: `sk_test_${randomBytes(12).toString("hex")}`,
          livemode: false,
          refresh_token: `rt_${randomBytes(12).toString("hex")}`,
          token_type: "bearer",
          stripe_publishable_key: `pk_test_${randomBytes(12).toString("hex")}`,
          stripe_user_id: account.id,
          scope: "read_write",
        });
      }
      deauthorizations.push(fields);
      const account = accounts.get(fields.stripe_user_id ?? "");
      if (fields.client_id !== STANDIN_CLIENT_ID || !account || !account.connected) {
        return json(res, { error: "invalid_client", error_description: `This application is not connected to stripe account ${fields.stripe_user_id}, or that account does not exist.` }, 401);
      }
      account.connected = false;
      return json(res, { stripe_user_id: account.id });
    }
    const setup = /^\/setup\/s\/(\w+)$/.exec(url.pathname);
    if (req.method === "GET" && setup) {
      const link = links.get(setup[1]);
      if (!link) {
        res.writeHead(404, { "content-type": "text/html; charset=utf-8" });
        return res.end(`<!doctype html><title>Stripe stand-in</title><h1>This link has expired</h1>`);
      }
      links.delete(setup[1]);
      if (standIn.onboarding === "complete") accounts.get(link.account)!.object = accountObject(link.account, true, (accounts.get(link.account)!.object.metadata ?? {}) as Record<string, string>);
      res.writeHead(302, { location: link.returnUrl });
      return res.end();
    }
    return notFound(res, req, url);
  };

  const serve = (handler: typeof api) =>
    http.createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      await handler(req, res, new URL(req.url ?? "/", "http://stand-in"), Buffer.concat(chunks).toString("utf8"));
    });
  const apiServer = serve(api);
  const connectServer = serve(connect);
  await Promise.all([apiServer, connectServer].map((s) => new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve))));
  const base = `http://127.0.0.1:${(apiServer.address() as AddressInfo).port}`;
  const connectBase = `http://127.0.0.1:${(connectServer.address() as AddressInfo).port}`;
  return Object.assign(standIn, {
    url: base,
    connectUrl: connectBase,
    checkouts,
    portals,
    accounts,
    authorizations,
    tokenExchanges,
    deauthorizations,
    accountCreations,
    accountLinks,
    signIn: (account: string, answer: "approve" | "deny" = "approve") => void (signedIn = { account, answer }),
    failNext: (status: number, error: Record<string, unknown>, times = 1, path?: string) => void failures.push({ path: path ?? null, status, error, times }),
    close: async () => {
      await Promise.all([apiServer, connectServer].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    },
  });
}

/** An Account object as Stripe answers it: activated (charges and payouts on, nothing due) or fresh from `accounts.create`. */
export function accountObject(id: string, activated: boolean, metadata: Record<string, string>): Record<string, unknown> {
  const due = activated ? [] : ["business_profile.url", "external_account", "tos_acceptance.date"];
  return {
    id,
    object: "account",
    type: "standard",
    business_profile: { name: null, url: null },
    capabilities: activated ? { card_payments: "active", transfers: "active" } : {},
    charges_enabled: activated,
    country: "US",
    created: Math.floor(Date.now() / 1000),
    default_currency: "usd",
    details_submitted: activated,
    email: null,
    metadata,
    payouts_enabled: activated,
    requirements: {
      alternatives: [],
      current_deadline: null,
      currently_due: due,
      disabled_reason: activated ? null : "requirements.past_due",
      errors: [],
      eventually_due: due,
      past_due: due,
      pending_verification: [],
    },
  };
}

function notFound(res: http.ServerResponse, req: http.IncomingMessage, url: URL) {
  return json(res, { error: { type: "invalid_request_error", message: `Unrecognized request URL (${req.method}: ${url.pathname})` } }, 404);
}

/** `metadata[a]=1&metadata[b]=2` back into `{a: "1", b: "2"}`. */
export function nested(fields: Record<string, string>, prefix: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(fields)) {
    const m = new RegExp(`^${prefix.replace(/[[\]]/g, "\\$&")}\\[([^\\]]+)\\]$`).exec(k);
    if (m) out[m[1]] = v;
  }
  return out;
}

function json(res: http.ServerResponse, body: unknown, status = 200) {
  res.writeHead(status, { "content-type": "application/json", "request-id": `req_standin_${randomBytes(4).toString("hex")}` });
  res.end(JSON.stringify(body));
}

/** A Stripe event as Stripe sends it to a Connect webhook. */
export function stripeEvent(type: string, object: Record<string, unknown>, opts: { created: number; account?: string | null; id?: string; livemode?: boolean }) {
  return {
    id: opts.id ?? `evt_${randomBytes(12).toString("hex")}`,
    object: "event",
    api_version: Stripe.API_VERSION,
    created: opts.created,
    type,
    livemode: opts.livemode ?? false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    ...(opts.account ? { account: opts.account } : {}),
    data: { object },
  };
}

/** The body and headers of a delivery signed with the library's own test helper, at `timestamp` (Unix seconds). */
export function signedDelivery(event: unknown, secret: string, timestamp: number): { body: string; headers: Record<string, string> } {
  const body = JSON.stringify(event);
  const signature = Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp });
  return { body, headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": signature } };
}

/** A `checkout.session.completed` object for a subscription checkout. */
export function completedCheckout(p: { session: string; subscription: string; customer: string; user: string; plan: string; appId: string; paid?: boolean }) {
  return {
    id: p.session,
    object: "checkout.session",
    mode: "subscription",
    status: "complete",
    payment_status: p.paid === false ? "no_payment_required" : "paid",
    client_reference_id: p.user,
    customer: p.customer,
    subscription: p.subscription,
    metadata: { svc_app: p.appId, svc_environment: "test", svc_user: p.user, svc_plan: p.plan },
    livemode: false,
  };
}

/** A Subscription object as its events carry it (API 2025+: the period is on the item). */
export function subscriptionObject(p: {
  id: string;
  customer: string;
  status: string;
  price: string;
  periodStart: number;
  periodEnd: number;
  metadata?: Record<string, string>;
  trialEnd?: number | null;
  endedAt?: number | null;
}) {
  return {
    id: p.id,
    object: "subscription",
    customer: p.customer,
    status: p.status,
    metadata: p.metadata ?? {},
    created: p.periodStart,
    start_date: p.periodStart,
    trial_end: p.trialEnd ?? null,
    canceled_at: p.endedAt ?? null,
    ended_at: p.endedAt ?? null,
    livemode: false,
    items: {
      object: "list",
      data: [{ id: `si_${p.id.slice(4)}`, object: "subscription_item", price: { id: p.price, object: "price" }, quantity: 1, current_period_start: p.periodStart, current_period_end: p.periodEnd }],
    },
  };
}
