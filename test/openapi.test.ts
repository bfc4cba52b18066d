import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contract } from "@svc/contract";
import { openApiJson } from "../server/openapi.js";
import { startTestServer, type TestServer } from "./helpers/server.js";

describe("openapi.json", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
  });
  afterAll(() => server?.close());

  it("is committed and matches the contract (run `npm run openapi` when this fails)", () => {
    const committed = fs.readFileSync(new URL("../openapi.json", import.meta.url), "utf8");
    expect(committed === openApiJson(), "openapi.json is stale: run `npm run openapi` and commit it").toBe(true);
  });

  it("documents every route with its credential and the shared error envelope", () => {
    const doc = JSON.parse(openApiJson());
    for (const route of Object.values(contract)) {
      const path = route.path.replace(/:(\w+)/g, "{$1}");
      const op = doc.paths[path]?.[route.method.toLowerCase()];
      expect(op, `${route.method} ${path}`).toBeDefined();
      expect(op.responses["401"] ?? op.responses["500"]).toBeDefined();
      expect(op.responses["500"].content["application/json"].schema.$ref).toBe("#/components/schemas/ErrorEnvelope");
    }
    expect(doc.paths["/v1/runs"].post.security).toEqual([{ appKey: [] }]);
    expect(doc.paths["/v1/machines"].get.security).toEqual([{ sessionToken: [] }]);
    expect(doc.paths["/c/{pk}/v1/device/code"].post.security).toEqual([]);
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(["appKey", "connectKey", "pairingToken", "sessionToken"]);
    expect(doc.paths["/v1/runs"].post.responses["200"].content["text/event-stream"].schema.$ref).toBe("#/components/schemas/RunEvent");
  });

  it("is served at /v1/openapi.json without a credential", async () => {
    const res = await server.fetch("/v1/openapi.json");
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(openApiJson());
  });

  it("has a reference page at /docs whose assets are all served here (no CDN)", async () => {
    const res = await server.fetch("/docs");
    expect(res.status).toBe(200);
    const html = await res.text();
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(refs.length).toBeGreaterThanOrEqual(3);
    for (const ref of refs) {
      expect(ref, "an asset from another host").toMatch(/^\/docs\//);
      const asset = await server.fetch(ref);
      expect(asset.status, ref).toBe(200);
      expect((await asset.arrayBuffer()).byteLength, ref).toBeGreaterThan(100);
    }
  });
});
