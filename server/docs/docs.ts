import express, { type Router } from "express";
import { getAbsoluteFSPath } from "swagger-ui-dist";

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>svc API reference</title>
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <style>body { margin: 0 } .topbar { display: none }</style>
</head>
<body>
  <div id="reference"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: "/v1/openapi.json",
  dom_id: "#reference",
  deepLinking: true,
  docExpansion: "list",
  defaultModelsExpandDepth: 0,
  validatorUrl: null,
});
`;

/** The API reference at `/docs`: Swagger UI from the installed package, no CDN. */
export function docsRouter(): Router {
  const router = express.Router();
  const assets = getAbsoluteFSPath();
  router.get("/", (_req, res) => res.type("html").send(PAGE));
  router.get("/init.js", (_req, res) => res.type("application/javascript").send(INIT));
  for (const file of ["swagger-ui.css", "swagger-ui-bundle.js"]) {
    router.get(`/assets/${file}`, (_req, res) => res.sendFile(file, { root: assets, maxAge: "1d" }));
  }
  return router;
}
