import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { Services } from "../app.js";
import { tenantOf } from "../http/principal.js";
import { ApiError } from "../errors.js";
import { runEventStream } from "../runs/sse.js";

const s = initServer();

/** Runs (2-6) and their extensions: start and stream, re-attach, answer, cancel, report usage, read. */
export function runRoutes({ runs, runStore, runBus, logger, streamSlots }: Services) {
  return {
    createRun: s.route(contract.createRun, async ({ req, res, body }) => {
      // A slot for its stream first: refused, the run is not started (nothing created, nothing counted).
      streamSlots.take(tenantOf(req), res);
      const { runId, drivenHere } = await runs.start(tenantOf(req), body, req.idempotentRun);
      // The id goes out with the headers, before the first event.
      res.setHeader("Service-Run-Id", runId);
      return { status: 200, body: runEventStream(runStore, runBus, logger, runId, 0, res, !drivenHere) as never };
    }),
    getRunEvents: s.route(contract.getRunEvents, async ({ req, res, params, headers, query }) => {
      const run = await runs.find(tenantOf(req as never), params.id);
      streamSlots.take(tenantOf(req as never), res);
      if (run.status === "handed_back") throw new ApiError("run_finished", `Run ${run.id} was handed back to the app (serve_in_app): the service streamed nothing for it.`);
      const after = headers["last-event-id"] !== undefined ? Number(headers["last-event-id"]) : (query.after ?? 0);
      res.setHeader("Service-Run-Id", run.id);
      return { status: 200, body: runEventStream(runStore, runBus, logger, run.id, after, res) as never };
    }),
    getRun: s.route(contract.getRun, async ({ req, params }) => ({ status: 200, body: await runs.get(tenantOf(req), params.id) })),
    submitToolResult: s.route(contract.submitToolResult, async ({ req, params, body }) => ({ status: 200, body: await runs.answerToolCall(tenantOf(req), params.id, body) })),
    submitApproval: s.route(contract.submitApproval, async ({ req, params, body }) => ({ status: 200, body: await runs.answerApproval(tenantOf(req), params.id, body) })),
    cancelRun: s.route(contract.cancelRun, async ({ req, params, body }) => ({ status: 200, body: await runs.cancel(tenantOf(req), params.id, body) })),
    reportRunUsage: s.route(contract.reportRunUsage, async ({ req, params, body }) => ({ status: 200, body: await runs.reportUsage(tenantOf(req), params.id, body) })),
  };
}
