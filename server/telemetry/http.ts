import type { NextFunction, Request, Response } from "express";
import { context, defaultTextMapGetter, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { ATTR_ERROR_TYPE, ATTR_HTTP_REQUEST_METHOD, ATTR_HTTP_REQUEST_METHOD_ORIGINAL, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_HTTP_ROUTE, ATTR_URL_PATH, ATTR_URL_SCHEME, ATTR_USER_AGENT_ORIGINAL } from "@opentelemetry/semantic-conventions";
import { loggedPath } from "../http/request-context.js";
import { propagator, tracer, tracingOn } from "./tracing.js";

const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]);

/**
 * A SERVER span per request, under the caller's W3C `traceparent` when it sends
 * one (an app's request continues its own trace), named `{method} {http.route}`.
 * Everything the request does runs in the span's context: a run it starts is a
 * child of it. The route is the pattern, never the raw path (`/v1/runs/:id`, as
 * the metrics label it); `url.path` is the path without its query string (queries
 * may carry secrets). Off, it is one boolean test per request.
 */
export function traceRequests() {
  return (req: Request, res: Response, next: NextFunction) => {
    const w3c = propagator();
    if (!tracingOn() || !w3c) return next();
    const parent = w3c.extract(ROOT_CONTEXT, req.headers, defaultTextMapGetter);
    const method = KNOWN_METHODS.has(req.method) ? req.method : "_OTHER";
    const agent = req.headers["user-agent"];
    const span = tracer().startSpan(
      method === "_OTHER" ? "HTTP" : method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: method,
          ...(method === "_OTHER" ? { [ATTR_HTTP_REQUEST_METHOD_ORIGINAL]: req.method.slice(0, 32) } : {}),
          [ATTR_URL_PATH]: loggedPath(req),
          [ATTR_URL_SCHEME]: req.protocol,
          ...(agent ? { [ATTR_USER_AGENT_ORIGINAL]: agent.slice(0, 256) } : {}),
          "svc.request.id": req.id,
        },
      },
      parent,
    );
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const route = routeOf(req);
      if (route) {
        span.setAttribute(ATTR_HTTP_ROUTE, route);
        span.updateName(`${method === "_OTHER" ? "HTTP" : method} ${route}`);
      }
      // A response cut off before its end (the client went away): no status was answered in full.
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, res.statusCode);
      if (res.statusCode >= 500) {
        span.setAttribute(ATTR_ERROR_TYPE, String(res.statusCode));
        span.setStatus({ code: SpanStatusCode.ERROR });
      } else if (!res.writableFinished && !res.headersSent) {
        span.setAttribute(ATTR_ERROR_TYPE, "aborted");
      }
      span.end();
    };
    res.once("finish", end);
    res.once("close", end);
    context.with(trace.setSpan(parent, span), next);
  };
}

/** The route's pattern: the contract's path where ts-rest matched one, the mount of docs and the dashboard, an app route's own path; else none. */
function routeOf(req: Request): string | null {
  const contractRoute = (req as Request & { tsRestRoute?: { path: string } }).tsRestRoute;
  if (contractRoute) return contractRoute.path;
  const path = loggedPath(req);
  if (path === "/docs" || path.startsWith("/docs/")) return "/docs";
  if (path === "/dashboard" || path.startsWith("/dashboard/")) return "/dashboard";
  const own = (req as Request & { route?: { path?: unknown } }).route?.path;
  return typeof own === "string" && !req.baseUrl ? own : null;
}
