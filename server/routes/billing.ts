import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { sessionOf, tenantOf } from "../http/principal.js";
import { ApiError } from "../errors.js";

const s = initServer();

/**
 * The app's Stripe account, through Stripe Connect only (app key; the callback is authenticated by its state), the
 * components' billing reads, checkout and the customer portal (session), and Stripe's webhook (signed).
 */
export function billingRoutes({ billing, stripeWebhooks }: RouteServices) {
  return {
    getBillingAccount: s.route(contract.getBillingAccount, async ({ req }) => ({ status: 200, body: await billing.connect.view(tenantOf(req), { refresh: true }) })),
    connectBillingAccount: s.route(contract.connectBillingAccount, async () => {
      throw new ApiError(
        "connect_required",
        "A Stripe account is no longer attached by its id: start Stripe Connect with POST /v1/billing/connect ({\"mode\":\"oauth\"} for an existing account, {\"mode\":\"create\"} for a new one) and send the app owner's browser to the `url` it answers.",
      );
    }),
    disconnectBillingAccount: s.route(contract.disconnectBillingAccount, async ({ req }) => ({ status: 200, body: await billing.connect.disconnect(tenantOf(req)) })),
    startBillingConnect: s.route(contract.startBillingConnect, async ({ req, body }) => ({ status: 200, body: await billing.connect.start(tenantOf(req), body) })),
    billingConnectCallback: s.route(contract.billingConnectCallback, async ({ query, res }) => {
      // The URL carries a code and a state (both spent now): never cached, never sent on as a Referer.
      res.setHeader("Cache-Control", "no-store");
      res.setHeader("Referrer-Policy", "no-referrer");
      const answer = await billing.connect.callback(query);
      if (answer.kind === "redirect") {
        res.setHeader("Location", answer.location);
        return { status: 302, body: undefined };
      }
      return { status: 200, body: answer.body };
    }),
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
