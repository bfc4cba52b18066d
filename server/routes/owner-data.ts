import type { Request } from "express";
import { initServer } from "@ts-rest/express";
import { contract, type Environment } from "@svc/contract";
import type { RouteServices } from "../app.js";
import type { Tenant } from "../keys/keys.js";
import { streamed } from "./streamed.js";

const s = initServer();

/** The tenant an owner route acts on: the path's app and environment, once the signed-in owner is a member of the app. */
export type OwnerTenant = (req: Pick<Request, "principal">, params: { app: string; env: Environment }) => Promise<Tenant>;

/**
 * One app environment as its owner sees it on the dashboard: users, usage,
 * runs, plans, billing, conversions and webhooks. Each handler resolves the
 * tenant (membership checked) and calls the service the app-key routes use.
 */
export function ownerDataRoutes({ plans, users, directory, runInspector, machines, billing, webhooks, reports, insights }: RouteServices, tenantOf: OwnerTenant) {
  return {
    ownerOverview: s.route(contract.ownerOverview, async ({ req, params }) => ({ status: 200, body: await insights.overview(await tenantOf(req, params)) })),
    ownerListApiRequests: s.route(contract.ownerListApiRequests, async ({ req, params, query }) => ({ status: 200, body: await insights.requests(await tenantOf(req, params), query) })),
    ownerListUsers: s.route(contract.ownerListUsers, async ({ req, params, query }) => ({ status: 200, body: await directory.list(await tenantOf(req, params), query) })),
    ownerGetUser: s.route(contract.ownerGetUser, async ({ req, params }) => ({ status: 200, body: await directory.get(await tenantOf(req, params), params.user) })),
    ownerSetUserPlan: s.route(contract.ownerSetUserPlan, async ({ req, params, body }) => ({
      status: 200,
      body: await users.assignPlan(await tenantOf(req, params), params.user, body.plan),
    })),
    ownerRemoveMachine: s.route(contract.ownerRemoveMachine, async ({ req, params }) => ({
      status: 200,
      body: await machines.revokeForExternalUser(await tenantOf(req, params), params.user, params.machineId),
    })),
    ownerUsageSummary: s.route(contract.ownerUsageSummary, async ({ req, params, query }) => ({
      status: 200,
      body: await reports.summary(await tenantOf(req, params), query),
    })),
    ownerUsageExport: s.route(contract.ownerUsageExport, async ({ req, res, params, query }) => {
      const { range, csv } = reports.usageCsv(await tenantOf(req, params), query);
      res.setHeader("Content-Type", "text/csv; charset=utf-8");
      res.setHeader("Content-Disposition", `attachment; filename="usage-${params.env}-${range.from}-${range.to}.csv"`);
      res.setHeader("Cache-Control", "no-store");
      return { status: 200, body: streamed(contract.ownerUsageExport, csv) };
    }),
    ownerListRuns: s.route(contract.ownerListRuns, async ({ req, params, query }) => ({ status: 200, body: await runInspector.list(await tenantOf(req, params), query) })),
    ownerGetRun: s.route(contract.ownerGetRun, async ({ req, params }) => ({ status: 200, body: await runInspector.get(await tenantOf(req, params), params.id) })),
    ownerListPlans: s.route(contract.ownerListPlans, async ({ req, params, query }) => ({
      status: 200,
      body: { data: await plans.list(await tenantOf(req, params), { archived: query.archived === "true" }) },
    })),
    ownerCreatePlan: s.route(contract.ownerCreatePlan, async ({ req, params, body }) => ({ status: 201, body: await plans.create(await tenantOf(req, params), body) })),
    ownerUpdatePlan: s.route(contract.ownerUpdatePlan, async ({ req, params, body }) => ({ status: 200, body: await plans.update(await tenantOf(req, params), params.slug, body) })),
    ownerArchivePlan: s.route(contract.ownerArchivePlan, async ({ req, params }) => ({ status: 200, body: await plans.archive(await tenantOf(req, params), params.slug) })),
    ownerGetBillingAccount: s.route(contract.ownerGetBillingAccount, async ({ req, params }) => ({
      status: 200,
      body: await billing.connect.view(await tenantOf(req, params), { refresh: true }),
    })),
    ownerConnectBilling: s.route(contract.ownerConnectBilling, async ({ req, params, body }) => ({ status: 200, body: await billing.connect.start(await tenantOf(req, params), body) })),
    ownerConversions: s.route(contract.ownerConversions, async ({ req, params, query }) => ({
      status: 200,
      body: await reports.conversions(await tenantOf(req, params), query),
    })),
    ownerListWebhookEndpoints: s.route(contract.ownerListWebhookEndpoints, async ({ req, params }) => ({
      status: 200,
      body: { data: await webhooks.endpoints.list(await tenantOf(req, params)) },
    })),
    ownerCreateWebhookEndpoint: s.route(contract.ownerCreateWebhookEndpoint, async ({ req, params, body }) => ({
      status: 201,
      body: await webhooks.endpoints.create(await tenantOf(req, params), body),
    })),
    ownerDeleteWebhookEndpoint: s.route(contract.ownerDeleteWebhookEndpoint, async ({ req, params }) => ({
      status: 200,
      body: await webhooks.endpoints.disable(await tenantOf(req, params), params.id),
    })),
    ownerTestWebhookEndpoint: s.route(contract.ownerTestWebhookEndpoint, async ({ req, params }) => ({ status: 202, body: await webhooks.manual.ping(await tenantOf(req, params), params.id) })),
    ownerListWebhookDeliveries: s.route(contract.ownerListWebhookDeliveries, async ({ req, params, query }) => ({
      status: 200,
      body: await webhooks.log.list(await tenantOf(req, params), query),
    })),
    ownerResendWebhookDelivery: s.route(contract.ownerResendWebhookDelivery, async ({ req, params }) => ({
      status: 202,
      body: await webhooks.manual.resend(await tenantOf(req, params), params.id),
    })),
  };
}
