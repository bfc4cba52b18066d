import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { Services } from "../app.js";
import { sessionOf, tenantOf } from "../http/principal.js";

const s = initServer();

/** The app's Stripe account (app key), the components' billing reads, checkout and the customer portal (session), and Stripe's webhook (signed). */
export function billingRoutes({ billing, stripeWebhooks }: Services) {
  return {
    getBillingAccount: s.route(contract.getBillingAccount, async ({ req }) => ({ status: 200, body: await billing.account(tenantOf(req)) })),
    connectBillingAccount: s.route(contract.connectBillingAccount, async ({ req, body }) => ({
      status: 200,
      body: await billing.connect(tenantOf(req), body.stripeAccountId),
    })),
    getBilling: s.route(contract.getBilling, async ({ req }) => ({ status: 200, body: await billing.overview(sessionOf(req)) })),
    createCheckoutSession: s.route(contract.createCheckoutSession, async ({ req, body }) => ({
      status: 200,
      body: await billing.checkout(sessionOf(req), body),
    })),
    createPortalSession: s.route(contract.createPortalSession, async ({ req, body }) => ({
      status: 200,
      body: await billing.portal(sessionOf(req), body),
    })),
    receiveStripeWebhook: s.route(contract.receiveStripeWebhook, async ({ req, headers }) => ({
      status: 200,
      body: await stripeWebhooks.receive(req.rawBody, headers["stripe-signature"]),
    })),
  };
}
