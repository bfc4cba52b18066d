import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import express from "express";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DASHBOARD_DIST, dashboardRouter } from "../../server/dashboard/dashboard.js";
import { errorHandler } from "../../server/http/errors.js";
import { requestContext } from "../../server/http/request-context.js";
import { createLogger } from "../../server/logger.js";
import { Writable } from "node:stream";
import { startTestServer, type TestServer } from "../helpers/server.js";

const built = fs.existsSync(path.join(DASHBOARD_DIST, "index.html"));

function builtFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? builtFiles(path.join(dir, e.name)) : [path.join(dir, e.name)]));
}

describe("the dashboard's build", () => {
  it("exists (the root postinstall runs `npm run build:dashboard`)", () => {
    expect(built, `no ${DASHBOARD_DIST}/index.html: run npm run build:dashboard`).toBe(true);
  });

  it("names no other host: no CDN, no external font, no inline script", () => {
    const index = fs.readFileSync(path.join(DASHBOARD_DIST, "index.html"), "utf8");
    expect(index).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(index).not.toMatch(/\sstyle=/);
    for (const file of builtFiles(DASHBOARD_DIST)) {
      if (!/\.(html|js|css)$/.test(file)) continue;
      const text = fs.readFileSync(file, "utf8");
      // URLs a browser would load: in src/href attributes, CSS url() and @import, and module imports.
      const loads = [
        ...text.matchAll(/\b(?:src|href)=["']?(https?:)?\/\/[^"'\s>]+/g),
        ...text.matchAll(/url\(\s*["']?(?:https?:)?\/\/[^)]+\)/g),
        ...text.matchAll(/@import\s+["']?(?:url\()?["']?(?:https?:)?\/\//g),
        ...text.matchAll(/\bimport\s*\(?\s*["'](?:https?:)?\/\/[^"']+["']/g),
      ].map((m) => m[0]);
      expect(loads, file).toEqual([]);
      expect(text, file).not.toMatch(/fonts\.(googleapis|gstatic)\.com|cdn\.jsdelivr|unpkg\.com|cdnjs/);
    }
  });
});

describe("the dashboard served at /dashboard", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
  });
  afterAll(async () => {
    await server?.close();
  });

  it("answers index.html with a strict policy, never cached, at /dashboard and any deep link under it", async () => {
    const index = fs.readFileSync(path.join(DASHBOARD_DIST, "index.html"), "utf8");
    for (const p of ["/dashboard", "/dashboard/", "/dashboard/sign-in", "/dashboard/apps/app_x/test/runs/run_123", "/dashboard/invite?x=1"]) {
      const res = await server.fetch(p);
      expect(res.status, p).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/html/);
      expect(res.headers.get("cache-control")).toBe("no-cache");
      const csp = res.headers.get("content-security-policy") ?? "";
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toContain("unsafe-inline");
      expect(csp).not.toContain("unsafe-eval");
      expect(res.headers.get("x-frame-options")).toBe("DENY");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(await res.text()).toBe(index);
    }
  });

  it("serves the hashed assets with a year's immutable cache, and answers a missing one 404 in the envelope (never the page)", async () => {
    const index = await (await server.fetch("/dashboard/sign-in")).text();
    const assets = [...index.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((m) => m[1]);
    expect(assets.some((a) => a.endsWith(".js"))).toBe(true);
    expect(assets.some((a) => a.endsWith(".css"))).toBe(true);
    for (const asset of assets) {
      const res = await server.fetch(asset);
      expect(res.status, asset).toBe(200);
      expect(res.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
      expect(res.headers.get("content-type")).toMatch(asset.endsWith(".js") ? /javascript/ : /text\/css/);
    }
    for (const missing of ["/dashboard/assets/index-nothere.js", "/dashboard/assets/RunDetail-nothere0.js", "/dashboard/assets/nothere", "/dashboard/nothere.js"]) {
      const res = await server.fetch(missing);
      expect(res.status, missing).toBe(404);
      const body = await res.json();
      expect(body.error).toMatchObject({ code: "not_found", type: "not_found_error" });
      expect(body.error.requestId).toBe(res.headers.get("request-id"));
    }
  });

  it("serves every chunk of the build (the pages' own, loaded later, too) with the same long cache; index.html names only the shared ones", async () => {
    const built = fs.readdirSync(path.join(DASHBOARD_DIST, "assets"));
    const scripts = built.filter((f) => f.endsWith(".js"));
    // Split by page: a chunk per page beside the entry and the shared ones.
    for (const chunk of ["index", "react", "shared", "Runs", "RunDetail", "Usage", "SignIn"]) expect(scripts.some((f) => f.startsWith(`${chunk}-`)), chunk).toBe(true);
    const index = fs.readFileSync(path.join(DASHBOARD_DIST, "index.html"), "utf8");
    expect(index).not.toMatch(/assets\/(Runs|RunDetail|Usage|SignIn)-/);
    for (const file of built) {
      const res = await server.fetch(`/dashboard/assets/${file}`);
      expect(res.status, file).toBe(200);
      expect(res.headers.get("cache-control"), file).toBe("public, max-age=31536000, immutable");
      expect(res.headers.get("content-security-policy"), file).toContain("script-src 'self'");
      await res.arrayBuffer();
    }
    // A page's chunk of another build (gone from this one): 404, not the page, so the import fails and the page says so.
    const gone = await server.fetch(`/dashboard/assets/${scripts.find((f) => f.startsWith("Runs-"))!.replace(/-[\w-]{8}\.js$/, "-00000000.js")}`);
    expect(gone.status).toBe(404);
    expect(gone.headers.get("content-type")).toMatch(/json/);
  });

  it("takes only GET and HEAD", async () => {
    const head = await server.fetch("/dashboard/users", { method: "HEAD" });
    expect(head.status).toBe(200);
    const post = await server.fetch("/dashboard/sign-in", { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect((await post.json()).error.code).toBe("method_not_allowed");
  });
});

describe("the dashboard without a build", () => {
  let url: string;
  let close: () => void;
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), "svc-dashboard-"));
  beforeAll(async () => {
    const app = express();
    app.use(requestContext(createLogger("silent", new Writable({ write: (_c, _e, cb) => cb() }))));
    app.use("/dashboard", dashboardRouter(empty));
    app.use(errorHandler());
    const listening = app.listen(0);
    await new Promise((r) => listening.once("listening", r));
    url = `http://127.0.0.1:${(listening.address() as AddressInfo).port}`;
    close = () => listening.close();
  });
  afterAll(() => {
    close?.();
    fs.rmSync(empty, { recursive: true, force: true });
  });

  it("answers 503 in the envelope, saying how to build it", async () => {
    for (const p of ["/dashboard", "/dashboard/apps/app_x/keys"]) {
      const res = await fetch(`${url}${p}`);
      expect(res.status).toBe(503);
      const body = await res.json();
      expect(body.error).toMatchObject({ code: "service_unavailable", type: "api_error" });
      expect(body.error.message).toContain("npm run build:dashboard");
    }
  });
});
