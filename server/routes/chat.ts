import { Readable } from "node:stream";
import { initServer } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { tenantOf } from "../http/principal.js";
import { streamed } from "./streamed.js";

const s = initServer();

/** Chat completions (1) and the models that can be asked for. */
export function chatRoutes({ chat, streamSlots }: RouteServices) {
  return {
    createChatCompletion: s.route(contract.createChatCompletion, async ({ req, res, body }) => {
      // A streamed answer holds a slot for its stream, taken before the run starts (refused: nothing created).
      if (body.stream) streamSlots.take(tenantOf(req), res);
      const answer = await chat.complete(tenantOf(req), body, res, req.idempotentRun);
      return { status: 200, body: answer instanceof Readable ? streamed(contract.createChatCompletion, answer) : answer };
    }),
    listModels: s.route(contract.listModels, async ({ req, query }) => ({ status: 200, body: await chat.models(tenantOf(req), query.user) })),
  };
}
