import type { NextFunction, Request, Response } from "express";
import { routePattern } from "./route-pattern.js";
import { ApiError } from "../errors.js";

interface KnownRoute {
  pattern: RegExp;
  method: string;
}

/**
 * Runs after every real route: a path that exists with another method is 405
 * (with `Allow`), anything else 404 `route_not_found`, both in the envelope.
 */
export function routeFallback(routes: { method: string; path: string }[]) {
  const known: KnownRoute[] = routes.map((r) => ({ pattern: routePattern(r.path), method: r.method }));
  return (req: Request, res: Response, next: NextFunction) => {
    const allowed = [...new Set(known.filter((r) => r.pattern.test(req.path)).map((r) => r.method))];
    if (allowed.length === 0) {
      // A client configured with the host but not `/v1` (an OpenAI base URL, say): say where the route is.
      // ...or with `/v1` twice (a base URL ending in /v1, and a client adding its own).
      const single = req.path.replace(/^(\/v1)+(?=\/v1\/)/, "");
      const withV1 =
        !req.path.startsWith("/v1/") && known.some((r) => r.pattern.test(`/v1${req.path}`))
          ? ` Did you mean /v1${req.path}? The base URL ends in /v1.`
          : single !== req.path && known.some((r) => r.pattern.test(single))
            ? ` Did you mean ${single}? The base URL ends in /v1 once: the client added another.`
            : "";
      return next(new ApiError("route_not_found", `No route ${req.method} ${req.path}.${withV1}`));
    }
    if (allowed.includes("GET")) allowed.push("HEAD");
    res.setHeader("Allow", allowed.join(", "));
    next(new ApiError("method_not_allowed", `${req.method} is not allowed on ${req.path}; allowed: ${allowed.join(", ")}.`));
  };
}
