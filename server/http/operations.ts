import { Router, type NextFunction, type Request, type Response } from "express";
import { ApiError } from "../errors.js";
import { hashSecret, secretMatches } from "../crypto.js";
import { OUTAGE_RETRY_AFTER_SECONDS } from "../db/outage.js";
import type { Database } from "../db/open.js";
import type { Metrics } from "../metrics/metrics.js";
import { loggedPath } from "./request-context.js";
import { routePattern } from "./route-pattern.js";

/** How long `/readyz` waits for the database's answer to a trivial query. */
export const READY_TIMEOUT_MS = 2000;

/**
 * `/healthz` (liveness: the process serves) and `/readyz` (readiness: the database
 * answers `SELECT 1` within 2 s, else 503 `database_unavailable` with Retry-After).
 * Outside the contract, like `/docs`: no credential, for load balancers and orchestrators.
 */
export function healthRouter(db: Pick<Database, "query">, timeoutMs = READY_TIMEOUT_MS): Router {
  const router = Router();
  router.get("/healthz", (_req, res) => {
    res.setHeader("Cache-Control", "no-store");
    res.json({ status: "ok" });
  });
  router.get("/readyz", async (_req, res, next) => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), timeoutMs)));
    const answered = await Promise.race([db.query("SELECT 1").then(() => "ok" as const, () => "failed" as const), late]);
    clearTimeout(timer);
    if (answered === "ok") {
      res.setHeader("Cache-Control", "no-store");
      res.json({ status: "ok" });
      return;
    }
    const why = answered === "late" ? `did not answer within ${timeoutMs / 1000} s` : "refused a trivial query";
    next(new ApiError("database_unavailable", `Not ready: the database ${why}; retry after the time in Retry-After.`, { headers: { "Retry-After": String(OUTAGE_RETRY_AFTER_SECONDS) } }));
  });
  return router;
}

/**
 * `GET /metrics` (Prometheus text). `token` null: the route does not exist (404, like any
 * unknown route); otherwise only `Authorization: Bearer <token>` reads it (401 without it
 * or with another), compared in constant time. `open`: the separate metrics listener
 * (`SVC_METRICS_ADDR`), which takes no token.
 */
export function metricsHandler(metrics: Metrics, access: { token: string | null } | { open: true }) {
  const tokenHash = "token" in access && access.token !== null ? hashSecret(access.token) : null;
  return async (req: Request, res: Response, next: NextFunction) => {
    if (!("open" in access)) {
      if (tokenHash === null) return next(new ApiError("route_not_found", `No route ${req.method} ${loggedPath(req)}.`));
      const header = req.headers.authorization;
      if (!header) return next(new ApiError("missing_credential", "GET /metrics needs Authorization: Bearer <SVC_METRICS_TOKEN>."));
      const presented = /^Bearer (.+)$/i.exec(header)?.[1] ?? "";
      if (!secretMatches(presented, tokenHash)) return next(new ApiError("invalid_credential", "The metrics token is not the configured SVC_METRICS_TOKEN."));
    }
    try {
      const { contentType, body } = await metrics.scrape();
      res.setHeader("Cache-Control", "no-store");
      res.setHeader("Content-Type", contentType);
      res.end(body);
    } catch (err) {
      next(err);
    }
  };
}

/**
 * Counts every answered request in the metrics under its route pattern: the contract's
 * path (`/v1/runs/:id`) where ts-rest matched one, else one of `known` (pages, docs,
 * downloads), else `unmatched`. Raw paths never become labels (ids would make a series each).
 */
export function requestMetrics(metrics: Metrics, known: string[]) {
  const patterns = known.map((path) => ({ path, re: routePattern(path) }));
  const routeOf = (req: Request): string => {
    const contractRoute = (req as Request & { tsRestRoute?: { path: string } }).tsRestRoute;
    if (contractRoute) return contractRoute.path;
    const path = loggedPath(req);
    if (path === "/docs" || path.startsWith("/docs/")) return "/docs";
    if (path === "/dashboard" || path.startsWith("/dashboard/")) return "/dashboard";
    return patterns.find((p) => p.re.test(path))?.path ?? "unmatched";
  };
  return (req: Request, res: Response, next: NextFunction) => {
    const started = process.hrtime.bigint();
    let counted = false;
    const count = () => {
      if (counted) return;
      counted = true;
      metrics.request(req.method, routeOf(req), res.statusCode, Number(process.hrtime.bigint() - started) / 1e9);
    };
    res.once("finish", count);
    res.once("close", count);
    next();
  };
}
