import type { NextFunction, Request, Response } from "express";
import { randomId } from "../crypto.js";
import type { Logger } from "../logger.js";
import { requestScope, type RequestScope } from "../request-scope.js";
import { sendServerTiming } from "./server-timing.js";

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** `req_...`, sent back in the `Request-Id` and `x-request-id` headers and in every error envelope. */
      id: string;
      log: Logger;
    }
  }
}

/**
 * The full path as the client sent it, without the query string (queries may carry
 * secrets). `req.path` is relative to the router a request was mounted under (`/docs/x`
 * logged `/x`), so the original URL is read instead.
 */
export function loggedPath(req: Pick<Request, "originalUrl" | "url">): string {
  const url = req.originalUrl || req.url;
  const cut = url.search(/[?#]/);
  return cut === -1 ? url : url.slice(0, cut);
}

/**
 * Gives each request an id and a child logger, and writes one access-log line when
 * it finishes. Only the path is logged, never the query string, headers or body:
 * credentials and user codes never reach a log.
 */
export function requestContext(logger: Logger) {
  return (req: Request, res: Response, next: NextFunction) => {
    const started = process.hrtime.bigint();
    req.id = randomId("req_", 20);
    req.log = logger.child({ requestId: req.id });
    res.setHeader("Request-Id", req.id);
    // The name OpenAI's and most other clients read the request id from.
    res.setHeader("x-request-id", req.id);
    res.on("finish", () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      req.log.info({ method: req.method, path: loggedPath(req), status: res.statusCode, ms: Math.round(ms * 100) / 100 }, "request");
    });
    // The rest of the request runs in its scope (see request-scope.ts).
    const scope: RequestScope = { req, res, statements: 0, timing: { db: 0, machine: 0 } };
    sendServerTiming(res, scope, started);
    requestScope.run(scope, next);
  };
}
