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

export interface StripeStandIn {
  url: string;
  checkouts: RecordedCheckout[];
  portals: RecordedPortal[];
  /** The next `times` checkout or portal requests answer this Stripe error instead (the library retries a 5xx once). */
  failNext(status: number, error: { type: string; message: string; code?: string }, times?: number): void;
  close(): Promise<void>;
}

export async function startStripeStandIn(): Promise<StripeStandIn> {
  const checkouts: RecordedCheckout[] = [];
  const portals: RecordedPortal[] = [];
  let failure: { status: number; error: Record<string, unknown>; times: number } | null = null;
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const url = new URL(req.url ?? "/", base);
    if (req.method === "POST" && (url.pathname === "/v1/checkout/sessions" || url.pathname === "/v1/billing_portal/sessions")) {
      if (!/^Bearer sk_test_/.test(req.headers.authorization ?? "")) return json(res, { error: { type: "invalid_request_error", message: "Invalid API Key provided" } }, 401);
      if (failure) {
        const f = failure;
        if (--failure.times <= 0) failure = null;
        return json(res, { error: f.error }, f.status);
      }
    }
    const stripeAccount = (req.headers["stripe-account"] as string | undefined) ?? null;
    if (req.method === "POST" && url.pathname === "/v1/billing_portal/sessions") {
      const fields = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString("utf8")));
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
      const fields = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString("utf8")));
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
    return json(res, { error: { type: "invalid_request_error", message: `Unrecognized request URL (${req.method}: ${url.pathname})` } }, 404);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: base,
    checkouts,
    portals,
    failNext: (status, error, times = 1) => void (failure = { status, error, times }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
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
