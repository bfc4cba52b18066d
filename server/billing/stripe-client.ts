import Stripe from "stripe";
import type { Config } from "../config.js";

/**
 * The platform's Stripe client, or null when no secret key is configured
 * (checkout then answers 503). `STRIPE_API_URL` points it elsewhere (a
 * stand-in in tests): the library takes a host, a port and a protocol.
 */
export function stripeClient(config: Config["stripe"]): Stripe | null {
  if (!config.secretKey) return null;
  if (!config.apiUrl) return new Stripe(config.secretKey, { maxNetworkRetries: 1 });
  const url = new URL(config.apiUrl);
  const protocol = url.protocol === "http:" ? "http" : "https";
  return new Stripe(config.secretKey, {
    host: url.hostname,
    port: url.port ? Number(url.port) : protocol === "http" ? 80 : 443,
    protocol,
    maxNetworkRetries: 1,
  });
}

/** Verifies a webhook's signature over its raw body (no client needed: the library's static helper). */
export function verifyStripeEvent(rawBody: Buffer, signature: string, secret: string, nowMs: number): Stripe.Event {
  // The service's clock decides the signature's age (Stripe's 5-minute tolerance), like every other expiry here.
  return Stripe.webhooks.constructEvent(rawBody, signature, secret, undefined, undefined, nowMs);
}

export type { Stripe };
