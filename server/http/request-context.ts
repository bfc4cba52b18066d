import { AsyncLocalStorage } from "node:async_hooks";
import type { NextFunction, Request, Response } from "express";
import { randomId } from "../crypto.js";
import type { Logger } from "../logger.js";
import { statementsSent } from "../db/outage.js";

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** `req_...`, sent back in the `Request-Id` header and in every error envelope. */
      id: string;
      log: Logger;
    }
  }
}

/**
 * Gives each request an id and a child logger, and writes one access-log line when
 * it finishes. Only the path is logged, never the query string, headers or body:
 * credentials and user codes never reach a log.
 */
/**
 * The request whose work is running, wherever that work has got to (callbacks,
 * promises, stream events): an exception escaping into the process's handlers is
 * logged with its request id and answered 500 instead of stopping the process.
 */
export const requestScope = new AsyncLocalStorage<{ req: Request; res: Response }>();

export function requestContext(logger: Logger) {
  return (req: Request, res: Response, next: NextFunction) => {
    const started = process.hrtime.bigint();
    req.id = randomId("req_", 20);
    req.log = logger.child({ requestId: req.id });
    res.setHeader("Request-Id", req.id);
    res.on("finish", () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      req.log.info({ method: req.method, path: req.path, status: res.statusCode, ms: Math.round(ms * 100) / 100 }, "request");
    });
    requestScope.run({ req, res }, () => statementsSent.run({ count: 0 }, next));
  };
}
