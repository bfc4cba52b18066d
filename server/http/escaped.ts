import type { Logger } from "../logger.js";
import { ApiError } from "../errors.js";
import { isDatabaseUnavailable, nothingSent, type DatabaseOutage } from "../db/outage.js";
import { requestScope } from "../request-scope.js";
import { databaseUnavailable } from "./errors.js";

/**
 * An exception or rejection that escaped every handler and reached the
 * process (`uncaughtException`, `unhandledRejection`). When it happened in a
 * request's work (the request's async context says so) it is that request's
 * failure: logged with its id and answered 500 in the envelope (503 when the
 * database is unreachable), and the process carries on. A database outage met
 * outside any request is the outage, logged once. Returns what it was, so the
 * caller decides about anything else.
 */
export function handleEscaped(err: unknown, logger: Logger, outage: DatabaseOutage | null): "request" | "database" | "other" {
  const scope = requestScope.getStore();
  const unavailable = isDatabaseUnavailable(err);
  if (scope) {
    const { req, res } = scope;
    let answer: ApiError;
    if (unavailable) {
      outage?.report(err, req.id);
      answer = databaseUnavailable(nothingSent());
    } else {
      (req.log ?? logger).error({ err, requestId: req.id }, "unhandled error");
      answer = new ApiError("internal_error", `Something went wrong on our side; quote request id ${req.id} to support.`);
    }
    try {
      if (res.headersSent || res.writableEnded) {
        if (!res.writableEnded) res.destroy();
      } else {
        for (const [name, value] of Object.entries(answer.extra.headers ?? {})) res.setHeader(name, value);
        res.status(answer.status).json(answer.toEnvelope(req.id));
      }
    } catch {
      res.destroy();
    }
    return "request";
  }
  if (unavailable) {
    outage?.report(err);
    return "database";
  }
  return "other";
}
