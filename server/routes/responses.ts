import { Readable } from "node:stream";
import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { tenantOf } from "../http/principal.js";
import { streamed } from "./streamed.js";

const s = initServer();

/** The Responses API: a model response (the caller owns the loop) and the stored responses. */
export function responseRoutes({ responses, streamSlots }: RouteServices) {
  return {
    createResponse: s.route(contract.createResponse, async ({ req, res, body }) => {
      // A streamed answer holds a slot for its stream, taken before the run starts (refused: nothing created).
      if (body.stream) streamSlots.take(tenantOf(req), res);
      const answer = await responses.create(tenantOf(req), body, res, req.idempotentRun);
      return { status: 200, body: answer instanceof Readable ? streamed(contract.createResponse, answer) : answer };
    }),
    getResponse: s.route(contract.getResponse, async ({ req, params, query }) => ({ status: 200, body: await responses.retrieve(tenantOf(req), params.id, query.user) })),
    deleteResponse: s.route(contract.deleteResponse, async ({ req, params, query }) => ({ status: 200, body: await responses.remove(tenantOf(req), params.id, query.user) })),
    listResponseInputItems: s.route(contract.listResponseInputItems, async ({ req, params, query }) => ({ status: 200, body: await responses.inputItems(tenantOf(req), params.id, query) })),
  };
}
