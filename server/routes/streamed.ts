import type { Readable } from "node:stream";
import type { AppRoute, ServerInferResponseBody } from "@ts-rest/core";

/**
 * A streamed answer as the body of a route's 200. The contract declares what
 * the stream carries (a `text/event-stream` or `text/csv` as a string, or a
 * chat completion's chunks where the JSON answer would be), so ts-rest types
 * the 200 body by that; Express pipes a `Readable` body out as it is produced.
 * This is the one place that hands a stream over as the declared body.
 */
export function streamed<R extends AppRoute>(_route: R, body: Readable): ServerInferResponseBody<R, 200> {
  return body as unknown as ServerInferResponseBody<R, 200>;
}
