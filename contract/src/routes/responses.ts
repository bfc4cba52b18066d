import { meta } from "../credentials.js";
import {
  CreateResponseRequest,
  ResponseDeleted,
  ResponseIdParam,
  ResponseInputItemList,
  ResponseInputItemsQuery,
  ResponseObject,
  ResponseReadQuery,
} from "../responses.js";
import { appKeyErrors, c, errors, notBuilt, OPTIONS } from "./shared.js";

/** The Responses API (Open Responses): one model response, the caller owns the loop; stored responses. */
export const responsesContract = c.router(
  {
    createResponse: {
      method: "POST",
      path: "/v1/responses",
      summary: "Create a model response (Open Responses / OpenAI Responses API)",
      description:
        "The Responses request plus `user` (or `safety_identifier`: required). Routed, counted and refused like a chat completion: `svc/echo` is answered by the service; `auto` and aliases reach a model runtime on the user's own machine. Function tools are the caller's: a response that calls one ends with its `function_call` items, and the caller sends `function_call_output` items in the next request (with `previous_response_id` or the whole input). With `stream: true` the answer is a `text/event-stream` of the specification's events, each with `sequence_number`. The run behind it is in `Service-Run-Id`.",
      body: CreateResponseRequest,
      responses: { 200: ResponseObject, ...errors(402, 409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    getResponse: {
      method: "GET",
      path: "/v1/responses/:id",
      summary: "Read a stored response",
      description: "A response created with `store` (the default), within the retention. Another app's, environment's or (with `user`) user's response is a 404, as an unknown id is.",
      pathParams: ResponseIdParam,
      query: ResponseReadQuery,
      responses: { 200: ResponseObject, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    deleteResponse: {
      method: "DELETE",
      path: "/v1/responses/:id",
      summary: "Delete a stored response",
      description: "Its input and output are deleted; its run record and ledger rows stay (they are the usage). It can no longer be read or continued with `previous_response_id`.",
      pathParams: ResponseIdParam,
      query: ResponseReadQuery,
      body: c.noBody(),
      responses: { 200: ResponseDeleted, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    listResponseInputItems: {
      method: "GET",
      path: "/v1/responses/:id/input_items",
      summary: "List a stored response's input items",
      description: "The items the request gave (its `instructions` and the items of `previous_response_id` are not among them), each with its id, a page at a time.",
      pathParams: ResponseIdParam,
      query: ResponseInputItemsQuery,
      responses: { 200: ResponseInputItemList, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
  },
  OPTIONS,
);
