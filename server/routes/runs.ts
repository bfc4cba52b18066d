import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { tenantOf } from "../http/principal.js";
import { streamed } from "./streamed.js";

const s = initServer();

/** Runs (2-6) and their extensions: start and stream, re-attach, answer, cancel, report usage, read. */
export function runRoutes({ runs, runStreams }: RouteServices) {
  return {
    createRun: s.route(contract.createRun, async ({ req, res, body }) => ({
      status: 200,
      body: streamed(contract.createRun, await runStreams.start(tenantOf(req), body, res, req.idempotentRun)),
    })),
    getRunEvents: s.route(contract.getRunEvents, async ({ req, res, params, headers, query }) => ({
      status: 200,
      body: streamed(contract.getRunEvents, await runStreams.reattach(tenantOf(req), params.id, { lastEventId: headers["last-event-id"], after: query.after }, res)),
    })),
    getRun: s.route(contract.getRun, async ({ req, params }) => ({ status: 200, body: await runs.get(tenantOf(req), params.id) })),
    submitToolResult: s.route(contract.submitToolResult, async ({ req, params, body }) => ({ status: 200, body: await runs.answerToolCall(tenantOf(req), params.id, body) })),
    submitApproval: s.route(contract.submitApproval, async ({ req, params, body }) => ({ status: 200, body: await runs.answerApproval(tenantOf(req), params.id, body) })),
    raiseRunBudget: s.route(contract.raiseRunBudget, async ({ req, params, body }) => ({ status: 200, body: await runs.raiseBudget(tenantOf(req), params.id, body) })),
    sendRunMessage: s.route(contract.sendRunMessage, async ({ req, params, body }) => ({ status: 202, body: await runs.sendMessage(tenantOf(req), params.id, body) })),
    cancelRun: s.route(contract.cancelRun, async ({ req, params, body }) => ({ status: 200, body: await runs.cancel(tenantOf(req), params.id, body) })),
    reportRunUsage: s.route(contract.reportRunUsage, async ({ req, params, body }) => ({ status: 200, body: await runs.reportUsage(tenantOf(req), params.id, body) })),
  };
}
