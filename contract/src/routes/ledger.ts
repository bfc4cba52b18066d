import { z } from "zod";
import { meta } from "../credentials.js";
import { MachineRemoved } from "../pairing.js";
import { Compute, Plan, PlanList, PlanListQuery, UsagePage, UsageQuery, User } from "../reads.js";
import { AssignPlanRequest, PlanInput, PlanSlugParam, PlanUpdate } from "../billing.js";
import { appKeyErrors, c, errors, notBuilt, OPTIONS } from "./shared.js";

/** Reads of users, compute and usage, and plans (16-19 and their extensions). */
export const ledgerContract = c.router(
  {
    // 16
    getUser: {
      method: "GET",
      path: "/v1/users/:id",
      summary: "A user's plan, allowance, usage this period and what is connected",
      pathParams: z.object({ id: z.string().min(1).max(256) }),
      responses: { 200: User, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 17
    getUserCompute: {
      method: "GET",
      path: "/v1/users/:id/compute",
      summary: "A user's machines, runtimes, cost classes and live state",
      pathParams: z.object({ id: z.string().min(1).max(256) }),
      responses: { 200: Compute, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: the app revokes one of its user's machines
    revokeUserMachine: {
      method: "DELETE",
      path: "/v1/users/:id/machines/:machineId",
      summary: "Revoke one of a user's machines",
      description: "Its pairing token stops working at once and its connection is closed. A machine of another user, app or environment is 404.",
      pathParams: z.object({ id: z.string().min(1).max(256), machineId: z.string().min(1).max(64) }),
      responses: { 200: MachineRemoved, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // 18
    listUsage: {
      method: "GET",
      path: "/v1/usage",
      summary: "Usage rows of the ledger",
      description:
        "The ledger's rows in id order. Filter by `user`, `period` (`YYYY-MM`), `environment` (the key's own), `run` and `costClass`; paginated with `cursor` (`nextCursor` of the previous page). Amounts in integer micros; `costClass` on every row.",
      query: UsageQuery,
      responses: { 200: UsagePage, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 19
    listPlans: {
      method: "GET",
      path: "/v1/plans",
      summary: "The plans the app configured",
      description: "For rendering a pricing page. Archived plans only with `archived=true`.",
      query: PlanListQuery,
      responses: { 200: PlanList, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: the app configures its plans (also `svc plans ...` and `svc plans apply <file>`)
    createPlan: {
      method: "POST",
      path: "/v1/plans",
      summary: "Create a plan",
      description: "Price, period, allowance (runs or tokens), stop or overage, spend ceiling, trial and the Stripe price. `isDefault: true` makes it the plan users start on.",
      body: PlanInput,
      responses: { 201: Plan, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    updatePlan: {
      method: "PATCH",
      path: "/v1/plans/:slug",
      summary: "Change a plan",
      description: "Only the fields sent change. Subscribers see the change from their next run.",
      pathParams: PlanSlugParam,
      body: PlanUpdate,
      responses: { 200: Plan, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    archivePlan: {
      method: "DELETE",
      path: "/v1/plans/:slug",
      summary: "Archive a plan",
      description: "It is no longer sold nor the default; users on it keep it. Ledger rows are never removed.",
      pathParams: PlanSlugParam,
      responses: { 200: Plan, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    assignUserPlan: {
      method: "PUT",
      path: "/v1/users/:id/plan",
      summary: "Put a user on a plan",
      description: "Without a payment (a grant, a manual upgrade); `plan: null` returns the user to the default plan. A Stripe subscription, while live, takes precedence.",
      pathParams: z.object({ id: z.string().min(1).max(256) }),
      body: AssignPlanRequest,
      responses: { 200: User, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
  },
  OPTIONS,
);
