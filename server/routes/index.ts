import type { AppRoute } from "@ts-rest/core";
import type { createExpressEndpoints } from "@ts-rest/express";
import { contract, type Contract, type RouteMetadata } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { notBuilt } from "./not-built.js";
import { pairingRoutes } from "./pairing.js";
import { sessionRoutes } from "./sessions.js";
import { computeRoutes } from "./compute.js";
import { runRoutes } from "./runs.js";
import { chatRoutes } from "./chat.js";
import { responseRoutes } from "./responses.js";
import { webhookRoutes } from "./webhooks.js";
import { ledgerRoutes } from "./ledger.js";
import { billingRoutes } from "./billing.js";
import { ownerAccountRoutes } from "./owner-accounts.js";
import { ownerDataRoutes } from "./owner-data.js";
import { ownerOf } from "../http/principal.js";

type RouterImplementation = Parameters<typeof createExpressEndpoints<Contract>>[1];

/**
 * The implementation of every contract route. Routes not built yet answer 501;
 * each feature replaces its entries with real handlers.
 */
export function routes(services: RouteServices): RouterImplementation {
  const built: Record<string, unknown> = { ...pairingRoutes(services), ...sessionRoutes(services), ...computeRoutes(services), ...runRoutes(services), ...chatRoutes(services), ...responseRoutes(services), ...webhookRoutes(services), ...ledgerRoutes(services), ...billingRoutes(services), ...ownerAccountRoutes(services),
    // An environment's data: the path's app and environment, once the signed-in owner is a member of the app.
    ...ownerDataRoutes(services, async (req, params) => {
      await services.owners.requireMember(ownerOf(req), params.app);
      return { appId: params.app, environment: params.env };
    }),
  };
  const all = Object.fromEntries(
    Object.entries(contract).map(([name, route]) => {
      // The contract says which routes are built: a handler and `notBuiltYet` never disagree.
      const pending = (route.metadata as RouteMetadata).notBuiltYet;
      if (pending && built[name]) throw new Error(`route ${name} has a handler but its contract metadata says it is not built yet`);
      if (!pending && !built[name]) throw new Error(`route ${name} has no handler and its contract metadata does not say it is not built`);
      return [name, built[name] ?? notBuilt(route as AppRoute)];
    }),
  );
  return all as unknown as RouterImplementation;
}
