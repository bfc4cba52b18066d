import fs from "node:fs";
import path from "node:path";
import { fromRoot } from "../paths.js";
import express, { type NextFunction, type Request, type Response, type Router } from "express";
import { ApiError } from "../errors.js";

/** Where `npm run build:dashboard` (Vite) writes the owner's dashboard. */
export const DASHBOARD_DIST = fromRoot("dashboard", "dist");

/**
 * The dashboard holds an owner's keys and billing: our own scripts and styles
 * only (no inline script, no eval), calls to our own origin only, never framed.
 */
const SECURITY_HEADERS = {
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "no-referrer",
  "X-Content-Type-Options": "nosniff",
  "Cross-Origin-Opener-Policy": "same-origin",
};

/** A path naming a file (its last segment has an extension): never answered with the app's page. */
const FILE_PATH = /\/[^/]*\.[^/]*$/;

/**
 * The owner's dashboard at `/dashboard`: Vite's hashed assets with a year's
 * cache, and `index.html` (never cached) for every other path under it, so the
 * single-page app's deep links load. Without a build: 503 saying how to build it.
 */
export function dashboardRouter(dist = DASHBOARD_DIST): Router {
  const router = express.Router();
  const indexFile = path.join(dist, "index.html");

  router.use((req: Request, res: Response, next: NextFunction) => {
    res.set(SECURITY_HEADERS);
    if (req.method === "GET" || req.method === "HEAD") return next();
    res.setHeader("Allow", "GET, HEAD");
    next(new ApiError("method_not_allowed", `${req.method} is not allowed on ${req.originalUrl.split("?")[0]}; allowed: GET, HEAD.`));
  });
  // Content-hashed names: a new build has new names, so these never change.
  router.use("/assets", express.static(path.join(dist, "assets"), { immutable: true, maxAge: "365d", index: false, redirect: false, fallthrough: true }));
  // The build's other files (the icon): a short cache, their names are not hashed.
  router.use(express.static(dist, { index: false, redirect: false, maxAge: "1h", fallthrough: true }));
  router.use((req: Request, res: Response, next: NextFunction) => {
    if (FILE_PATH.test(req.path) || req.path.startsWith("/assets/")) {
      return next(new ApiError("not_found", `No dashboard file ${req.originalUrl.split("?")[0]}.`));
    }
    fs.readFile(indexFile, (err, html) => {
      if (err) {
        return next(new ApiError("service_unavailable", "The dashboard is not built: run `npm run build:dashboard` (the root `npm install` runs it)."));
      }
      res.setHeader("Cache-Control", "no-cache");
      res.type("html").send(html);
    });
  });
  return router;
}
