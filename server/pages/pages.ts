import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import express, { type Response, type Router } from "express";

const here = path.dirname(fileURLToPath(import.meta.url));
const read = (file: string) => fs.readFileSync(path.join(here, file), "utf8");

/**
 * Pages served to end users' browsers. A strict policy: our own scripts and
 * styles only, no framing (an approve button must never sit under another
 * site's overlay), no referrer, nothing cached.
 */
const SECURITY_HEADERS = {
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "no-referrer",
  "X-Content-Type-Options": "nosniff",
  "Cache-Control": "no-store",
};

const PAGES = {
  "/connect": { type: "html", body: read("connect/index.html") },
  "/connect/connect.js": { type: "application/javascript", body: read("connect/connect.js") },
  "/connect/connect.css": { type: "text/css", body: read("connect/connect.css") },
  "/billing": { type: "html", body: read("billing/index.html") },
  "/billing/billing.js": { type: "application/javascript", body: read("billing/billing.js") },
  "/billing/billing.css": { type: "text/css", body: read("billing/billing.css") },
} as const;

/**
 * The web components, loaded by apps' own pages on any origin: a module script
 * is fetched with CORS, so it is served to everyone; it holds no data.
 */
const COMPONENTS = { "/components/svc-components.js": read("components/svc-components.js") };
const COMPONENT_HEADERS = {
  "Access-Control-Allow-Origin": "*",
  "Cross-Origin-Resource-Policy": "cross-origin",
  "X-Content-Type-Options": "nosniff",
  "Cache-Control": "public, max-age=300",
};

export const PAGE_PATHS = [...Object.keys(PAGES), ...Object.keys(COMPONENTS)];

/** The hosted pages (`/connect`, `/billing`): the app sends its user's browser there with a session in the fragment. And the web components. */
export function pagesRouter(): Router {
  const router = express.Router({ strict: true });
  for (const [route, page] of Object.entries(PAGES)) {
    router.get(route, (_req, res: Response) => {
      res.set(SECURITY_HEADERS).type(page.type).send(page.body);
    });
  }
  for (const [route, body] of Object.entries(COMPONENTS)) {
    router.get(route, (_req, res: Response) => {
      res.set(COMPONENT_HEADERS).type("application/javascript").send(body);
    });
  }
  return router;
}
