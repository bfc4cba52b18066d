import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { tenantOf } from "../http/principal.js";

const s = initServer();

/** Outbound webhooks: the app's endpoints and the delivery log (app key, one app and environment). */
export function webhookRoutes({ webhooks }: RouteServices) {
  return {
    createWebhookEndpoint: s.route(contract.createWebhookEndpoint, async ({ req, body }) => ({
      status: 201,
      body: await webhooks.endpoints.create(tenantOf(req), body),
    })),
    listWebhookEndpoints: s.route(contract.listWebhookEndpoints, async ({ req }) => ({
      status: 200,
      body: { data: await webhooks.endpoints.list(tenantOf(req)) },
    })),
    deleteWebhookEndpoint: s.route(contract.deleteWebhookEndpoint, async ({ req, params }) => ({
      status: 200,
      body: await webhooks.endpoints.disable(tenantOf(req), params.id),
    })),
    listWebhookDeliveries: s.route(contract.listWebhookDeliveries, async ({ req, query }) => ({
      status: 200,
      body: await webhooks.log.list(tenantOf(req), query),
    })),
  };
}
