import fs from "node:fs";
import path from "node:path";
import { fromRoot } from "../paths.js";
import express, { type Response, type Router } from "express";

const here = fromRoot("server", "pages");
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

/**
 * A hosted page: the shared shell (`shell.html`: head, meta, one stylesheet, the page's
 * module scripts) around the page's own `<main>` (`<name>/main.html`). Its stylesheet
 * is the shared base (`shell.css`) followed by the page's own rules (`<name>/<name>.css`).
 */
function hostedPage(name: string, title: string, scripts: string[]) {
  const html = read("shell.html")
    .replace("{{title}}", title)
    .replace("{{stylesheet}}", `${name}/${name}.css`)
    .replace("{{scripts}}", scripts.map((src) => `  <script type="module" src="${src}"></script>`).join("\n"))
    .replace("{{main}}", () => read(`${name}/main.html`));
  return {
    [`/${name}`]: { type: "html", body: html },
    [`/${name}/${name}.js`]: { type: "application/javascript", body: read(`${name}/${name}.js`) },
    [`/${name}/${name}.css`]: { type: "text/css", body: read("shell.css") + read(`${name}/${name}.css`) },
  };
}

const PAGES: Record<string, { type: string; body: string }> = {
  ...hostedPage("connect", "Connect a machine", ["connect/connect.js"]),
  ...hostedPage("billing", "Plan and billing", ["components/svc-components.js", "billing/billing.js"]),
};

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
