import Stripe from "stripe";
import type { Config } from "../config.js";

/** Stripe's Connect host: OAuth's authorization page and its token and deauthorize calls. */
export const STRIPE_CONNECT_HOST = "https://connect.stripe.com";

/** The platform's Stripe clients: one for the API (api.stripe.com) and one for Connect's OAuth calls (connect.stripe.com). */
export interface StripeClients {
  api: Stripe;
  /** `oauth.token` and `oauth.deauthorize` go through this one (the library sends them to its `connect` host, or to `host` when one is set). */
  connect: Stripe;
  /** The OAuth authorization page's base, `https://connect.stripe.com` unless STRIPE_CONNECT_URL says otherwise. */
  connectUrl: string;
  /** The platform's Connect client id (`ca_...`): OAuth needs it; null when not configured. */
  clientId: string | null;
  /** The platform key's mode (`sk_live_`/`rk_live_`): its connected accounts' events say `livemode`, which names the environment. */
  livemode: boolean;
}

/** How long one call to Stripe may take (the library's default is 80 s) before it counts as Stripe unreachable. */
export const STRIPE_TIMEOUT_MS = 20_000;

/**
 * The platform's Stripe clients, or null when no secret key is configured
 * (checkout and connecting then answer 503). `STRIPE_API_URL` and
 * `STRIPE_CONNECT_URL` point them elsewhere (a stand-in in tests): the library
 * takes a host, a port and a protocol, and a `host` set on a client is used for
 * every call of it, OAuth's included, so each host gets its own client.
 */
export function stripeClients(config: Config["stripe"]): StripeClients | null {
  if (!config.secretKey) return null;
  return {
    api: client(config.secretKey, config.apiUrl),
    connect: client(config.secretKey, config.connectUrl),
    connectUrl: config.connectUrl ?? STRIPE_CONNECT_HOST,
    clientId: config.connectClientId,
    livemode: /^(sk|rk)_live_/.test(config.secretKey),
  };
}

function client(secretKey: string, at: string | null): Stripe {
  if (!at) return new Stripe(secretKey, { maxNetworkRetries: 1, timeout: STRIPE_TIMEOUT_MS });
  const url = new URL(at);
  const protocol = url.protocol === "http:" ? "http" : "https";
  return new Stripe(secretKey, {
    host: url.hostname,
    port: url.port ? Number(url.port) : protocol === "http" ? 80 : 443,
    protocol,
    maxNetworkRetries: 1,
    timeout: STRIPE_TIMEOUT_MS,
  });
}

/** Verifies a webhook's signature over its raw body (no client needed: the library's static helper). */
export function verifyStripeEvent(rawBody: Buffer, signature: string, secret: string, nowMs: number): Stripe.Event {
  // The service's clock decides the signature's age (Stripe's 5-minute tolerance), like every other expiry here.
  return Stripe.webhooks.constructEvent(rawBody, signature, secret, undefined, undefined, nowMs);
}

export type { Stripe };
