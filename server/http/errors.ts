import type { NextFunction, Request, Response } from "express";
import { ApiError } from "../errors.js";
import { isBusUnavailable } from "../bus/run-stream.js";
import { isDatabaseUnavailable, nothingSent, OUTAGE_RETRY_AFTER_SECONDS, type DatabaseOutage } from "../db/outage.js";

/** Maps body-parser's failures to the envelope's codes. */
function fromBodyParser(err: { type?: string; status?: number; message?: string }): ApiError | null {
  switch (err.type) {
    case "entity.parse.failed":
      return new ApiError("invalid_json", `The request body is not valid JSON: ${err.message ?? ""}`.trim());
    case "entity.too.deep":
      return new ApiError("invalid_json", err.message);
    case "entity.too.large":
      return new ApiError("payload_too_large", typeof (err as { limit?: unknown }).limit === "number" ? `The request body is too large: at most ${(err as { limit: number }).limit} bytes are taken (MAX_BODY_BYTES).` : undefined);
    case "encoding.unsupported":
    case "charset.unsupported":
      return new ApiError("unsupported_media_type", "The request body must be UTF-8 JSON.");
    case "request.aborted":
    case "request.size.invalid":
    case "stream.encoding.set":
      return new ApiError("invalid_request", "The request body could not be read.");
  }
  return null;
}

/**
 * Other refusals of the request itself that Express and its parsers raise as
 * `http-errors` (a path's bad percent-encoding in the router, say): their 4xx in
 * the envelope. Nothing of theirs but the status is trusted.
 */
function fromHttpError(err: { status?: unknown; expose?: unknown }): ApiError | null {
  if (err === null || typeof err !== "object" || err.expose !== true || typeof err.status !== "number") return null;
  if (err.status === 413) return new ApiError("payload_too_large");
  if (err.status === 415) return new ApiError("unsupported_media_type");
  if (err.status >= 400 && err.status < 500) return new ApiError("invalid_request");
  return null;
}

/**
 * The answer while the database is unreachable: 503 with Retry-After, which clients retry.
 * `nothingDone`: the request sent no statement to the database (its connections were refused), so
 * it created and changed nothing, which `Service-Nothing-Created: true` tells the client (the SDK
 * retries a run start only then: a retried start must not count a run twice).
 */
export function databaseUnavailable(nothingDone = false): ApiError {
  return new ApiError("database_unavailable", undefined, {
    headers: { "Retry-After": String(OUTAGE_RETRY_AFTER_SECONDS), ...(nothingDone ? { "Service-Nothing-Created": "true" } : {}) },
  });
}

/**
 * The one error middleware: every failure leaves as the envelope with the
 * request id. Unexpected errors are logged with that id and answered 500
 * without any detail (no stack trace reaches a client).
 */
export function errorHandler(outage: DatabaseOutage | null = null) {
  // Express recognises error middleware by its four parameters.
  return (err: unknown, req: Request, res: Response, _next: NextFunction) => {
    let apiError = err instanceof ApiError ? err : (fromBodyParser(err as { type?: string }) ?? fromHttpError(err as { status?: unknown }));
    if (!apiError && isBusUnavailable(err)) {
      apiError = new ApiError("bus_unavailable", undefined, { headers: { "Retry-After": String(OUTAGE_RETRY_AFTER_SECONDS) } });
    } else if (!apiError && isDatabaseUnavailable(err)) {
      // Logged once per outage (by the outage record), not per request.
      outage?.report(err, req.id);
      apiError = databaseUnavailable(nothingSent());
    } else if (!apiError) {
      req.log.error({ err }, "unhandled error");
      apiError = new ApiError("internal_error", `Something went wrong on our side; quote request id ${req.id} to support.`);
    } else if (apiError.status === 500) {
      req.log.error({ err }, "server error");
    } else if (apiError.status > 500 && apiError.code !== "database_unavailable" && apiError.code !== "bus_unavailable") {
      // A deliberate 501/502/503 (not built, Stripe not configured or unreachable): the service works as configured, no stack trace needed.
      req.log.warn({ code: apiError.code, reason: apiError.message }, `answered ${apiError.status}`);
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (apiError.status === 401) res.setHeader("WWW-Authenticate", 'Bearer realm="svc"');
    for (const [name, value] of Object.entries(apiError.extra.headers ?? {})) res.setHeader(name, value);
    res.status(apiError.status).json(apiError.toEnvelope(req.id));
  };
}
