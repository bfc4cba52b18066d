import { User } from "../reads.js";
import { AssignPlanRequest } from "../billing.js";
import { MachineRemoved } from "../pairing.js";
import { EnvParam, OwnerMachineParam, OwnerRunDetail, OwnerRunPage, OwnerRunParam, OwnerRunQuery, OwnerUserDetail, OwnerUserPage, OwnerUserParam, OwnerUserQuery, RangeQuery, UsageSummary } from "../owner.js";
import { c, csv, ENV, errors, OPTIONS, ownerErrors, signedIn } from "./shared.js";

/** One app environment's users, usage and runs. */
export const ownerUsageContract = c.router(
  {
    ownerListUsers: {
      method: "GET",
      path: `${ENV}/users`,
      summary: "End users",
      description: "Newest first; `q` searches ids and emails.",
      pathParams: EnvParam,
      query: OwnerUserQuery,
      responses: { 200: OwnerUserPage, ...ownerErrors },
      metadata: signedIn,
    },
    ownerGetUser: {
      method: "GET",
      path: `${ENV}/users/:user`,
      summary: "An end user",
      description: "Plan, allowance, usage this period, machines with live state and runtime versions, sessions.",
      pathParams: OwnerUserParam,
      responses: { 200: OwnerUserDetail, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSetUserPlan: {
      method: "PUT",
      path: `${ENV}/users/:user/plan`,
      summary: "Set an end user's plan",
      pathParams: OwnerUserParam,
      body: AssignPlanRequest,
      responses: { 200: User, ...errors(409), ...ownerErrors },
      metadata: signedIn,
    },
    ownerRemoveMachine: {
      method: "DELETE",
      path: `${ENV}/users/:user/machines/:machineId`,
      summary: "Remove an end user's machine",
      pathParams: OwnerMachineParam,
      body: c.noBody(),
      responses: { 200: MachineRemoved, ...ownerErrors },
      metadata: signedIn,
    },
    ownerUsageSummary: {
      method: "GET",
      path: `${ENV}/usage/summary`,
      summary: "Usage by day and cost class, top users",
      pathParams: EnvParam,
      query: RangeQuery,
      responses: { 200: UsageSummary, ...ownerErrors },
      metadata: signedIn,
    },
    ownerUsageExport: {
      method: "GET",
      path: `${ENV}/usage/export`,
      summary: "Usage rows as CSV",
      description: "Every ledger row of the range, oldest first, amounts in integer micros.",
      pathParams: EnvParam,
      query: RangeQuery,
      responses: { 200: csv, ...ownerErrors },
      metadata: signedIn,
    },
    ownerListRuns: {
      method: "GET",
      path: `${ENV}/runs`,
      summary: "Runs",
      description: "Newest first, filtered by user, status and route.",
      pathParams: EnvParam,
      query: OwnerRunQuery,
      responses: { 200: OwnerRunPage, ...ownerErrors },
      metadata: signedIn,
    },
    ownerGetRun: {
      method: "GET",
      path: `${ENV}/runs/:id`,
      summary: "A run inspected",
      description: "The run, its stored event timeline, approvals and who decided them, ledger rows, machine, and for a handed-back run the usage the app reported.",
      pathParams: OwnerRunParam,
      responses: { 200: OwnerRunDetail, ...ownerErrors },
      metadata: signedIn,
    },
  },
  OPTIONS,
);
