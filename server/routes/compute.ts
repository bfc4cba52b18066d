import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { tenantOf } from "../http/principal.js";

const s = initServer();

/** What the app reads and does about its users' machines (17 and the revocation). */
export function computeRoutes({ machines }: RouteServices) {
  return {
    getUserCompute: s.route(contract.getUserCompute, async ({ req, params }) => ({
      status: 200,
      body: { user: params.id, machines: await machines.listForExternalUser(tenantOf(req), params.id) },
    })),
    revokeUserMachine: s.route(contract.revokeUserMachine, async ({ req, params }) => ({
      status: 200,
      body: await machines.revokeForExternalUser(tenantOf(req), params.id, params.machineId),
    })),
  };
}
