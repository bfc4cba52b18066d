import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { tenantOf } from "../http/principal.js";

const s = initServer();

/** The ledger's reads (16, 18, 19) and the app's plan configuration. */
export function ledgerRoutes({ plans, users, reports }: RouteServices) {
  return {
    getUser: s.route(contract.getUser, async ({ req, params }) => ({ status: 200, body: await users.view(tenantOf(req), params.id) })),
    listUsage: s.route(contract.listUsage, async ({ req, query }) => ({ status: 200, body: await reports.usage(tenantOf(req), query) })),
    listPlans: s.route(contract.listPlans, async ({ req, query }) => ({
      status: 200,
      body: { data: await plans.list(tenantOf(req), { archived: query.archived === "true" }) },
    })),
    createPlan: s.route(contract.createPlan, async ({ req, body }) => ({ status: 201, body: await plans.create(tenantOf(req), body) })),
    updatePlan: s.route(contract.updatePlan, async ({ req, params, body }) => ({ status: 200, body: await plans.update(tenantOf(req), params.slug, body) })),
    archivePlan: s.route(contract.archivePlan, async ({ req, params }) => ({ status: 200, body: await plans.archive(tenantOf(req), params.slug) })),
    assignUserPlan: s.route(contract.assignUserPlan, async ({ req, params, body }) => ({ status: 200, body: await users.assignPlan(tenantOf(req), params.id, body.plan) })),
  };
}

