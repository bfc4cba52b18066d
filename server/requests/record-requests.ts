import type { NextFunction, Request, Response } from "express";
import { loggedPath } from "../http/request-context.js";
import type { RequestLog } from "./request-log.js";

/**
 * Records each request made with an app key in the request log once its answer has
 * gone (or its connection closed first): method, path without the query, the route's
 * pattern, status, the envelope's error code, duration and key. Nothing else of the
 * request (no body, query or header) is kept. Requests with any other credential, or
 * none that held, are not recorded: a stranger cannot write into an app's log.
 */
const short = (v: unknown, max: number): string | null => (typeof v === "string" && v.length > 0 ? v.slice(0, max) : null);

/** The run a request started (its `Service-Run-Id`) or names in its path. */
function runOf(req: Request, res: Response): string | null {
  const header = res.getHeader("Service-Run-Id");
  if (typeof header === "string") return short(header, 64);
  const id = req.params?.id;
  return typeof id === "string" && /^(run|resp)_[A-Za-z0-9]+$/.test(id) ? short(id.startsWith("resp_") ? `run_${id.slice(5)}` : id, 64) : null;
}

/** The end user a request names: `user` in its body or query (Responses' `safety_identifier` too), or a user route's id. */
function userOf(req: Request, route: string): string | null {
  const body = req.body as { user?: unknown; safety_identifier?: unknown } | undefined;
  const query = req.query as { user?: unknown } | undefined;
  return short(body?.user, 256) ?? short(body?.safety_identifier, 256) ?? short(query?.user, 256) ?? (route.startsWith("/v1/users/:id") ? short(req.params?.id, 256) : null);
}

export function recordRequests(log: RequestLog) {
  return (req: Request, res: Response, next: NextFunction) => {
    if (!log.enabled) return next();
    const started = process.hrtime.bigint();
    const at = log.now();
    let errorCode: string | null = null;
    const json = res.json.bind(res);
    res.json = (body: unknown) => {
      if (res.statusCode >= 400) {
        const code = (body as { error?: { code?: unknown } } | null)?.error?.code;
        errorCode = typeof code === "string" ? code.slice(0, 64) : null;
      }
      return json(body);
    };
    let recorded = false;
    const done = () => {
      if (recorded) return;
      recorded = true;
      const p = req.principal;
      if (p?.kind !== "appKey") return;
      const route = (req as Request & { tsRestRoute?: { path: string } }).tsRestRoute?.path ?? "unmatched";
      log.record({
        appId: p.appId,
        environment: p.environment,
        keyId: p.keyId,
        requestId: req.id,
        method: req.method,
        path: loggedPath(req),
        route,
        status: res.statusCode,
        errorCode,
        durationMs: Math.round(Number(process.hrtime.bigint() - started) / 1e6),
        // A path's run id that was not found names no run.
        runId: res.statusCode === 404 && res.getHeader("Service-Run-Id") === undefined ? null : runOf(req, res),
        user: userOf(req, route),
        at,
      });
    };
    res.once("finish", done);
    res.once("close", done);
    next();
  };
}
