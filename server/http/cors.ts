import type { NextFunction, Request, Response } from "express";
import { routePattern } from "./route-pattern.js";
import type { RouteMetadata } from "@svc/contract";

interface BrowserRoute {
  pattern: RegExp;
  method: string;
}

/**
 * CORS for the browser routes (those taking an end-user session), so the web
 * components work from an app's own frontend on any origin. Any origin may call
 * them: they take no cookies, only the `est_` bearer token the page was given,
 * which is what makes a request count. Every other route (app keys, pairing,
 * Stripe) stays same-origin: a browser has no business calling them.
 */
export function browserCors(routes: { method: string; path: string; metadata?: unknown }[]) {
  const browser: BrowserRoute[] = routes
    .filter((r) => (r.metadata as RouteMetadata | undefined)?.auth === "session")
    .map((r) => ({ pattern: routePattern(r.path), method: r.method }));
  return (req: Request, res: Response, next: NextFunction) => {
    if (req.headers.origin === undefined) return next();
    const methods = browser.filter((r) => r.pattern.test(req.path)).map((r) => r.method);
    if (methods.length === 0) return next();
    res.setHeader("Access-Control-Allow-Origin", "*");
    res.setHeader("Access-Control-Expose-Headers", "Request-Id, Retry-After, Service-Nothing-Created");
    if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
      res.setHeader("Access-Control-Allow-Methods", [...new Set(methods)].join(", "));
      res.setHeader("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.setHeader("Access-Control-Max-Age", "600");
      res.status(204).end();
      return;
    }
    next();
  };
}
