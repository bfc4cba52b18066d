import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuthenticationError, BadRequestError, NotFoundError, Svc, ServeInAppError, SvcError } from "@svc/sdk";
import { startTestServer, type TestServer } from "../helpers/server.js";

describe("sdk client against the real server", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
  });
  afterAll(() => server?.close());

  it("throws typed errors carrying status, code and request id", async () => {
    const svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    const err = await svc.users.retrieve("nobody").catch((e) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err).toMatchObject({ status: 404, code: "not_found" });
    expect(err.requestId).toMatch(/^req_/);

    const bad = new Svc({ apiKey: `${server.dev.appKey.split(".")[0]}.${"C".repeat(43)}`, baseUrl: `${server.url}/v1/` });
    const authErr = await bad.plans.list().catch((e) => e);
    expect(authErr).toBeInstanceOf(AuthenticationError);
    expect(authErr.code).toBe("invalid_credential");

    const invalid = await svc.sessions.create({ user: "" }).catch((e) => e);
    expect(invalid).toBeInstanceOf(BadRequestError);
    expect(invalid.param).toBe("user");
  });

  it("builds the error class from status and code", () => {
    const envelope = (code: string) => ({ error: { type: "routing_error", code, message: "m", requestId: "req_1" } });
    expect(SvcError.generate(409, envelope("serve_in_app"))).toBeInstanceOf(ServeInAppError);
    expect(SvcError.generate(409, envelope("no_compute"))).not.toBeInstanceOf(ServeInAppError);
    expect(SvcError.generate(502, "<html>").message).toBe("HTTP 502");
  });

  it("needs a key and a base URL, from options or the environment", () => {
    const saved = { key: process.env.SVC_API_KEY, url: process.env.SVC_BASE_URL };
    delete process.env.SVC_API_KEY;
    delete process.env.SVC_BASE_URL;
    try {
      expect(() => new Svc({ baseUrl: "http://x/v1" })).toThrow(/SVC_API_KEY/);
      expect(() => new Svc({ apiKey: "sk_svc_x" })).toThrow(/SVC_BASE_URL/);
      process.env.SVC_API_KEY = "sk_svc_x";
      process.env.SVC_BASE_URL = "http://x/v1";
      expect(() => new Svc()).not.toThrow();
    } finally {
      process.env.SVC_API_KEY = saved.key;
      process.env.SVC_BASE_URL = saved.url;
      if (saved.key === undefined) delete process.env.SVC_API_KEY;
      if (saved.url === undefined) delete process.env.SVC_BASE_URL;
    }
  });

  it("depends on neither Express nor Prisma", () => {
    const pkg = JSON.parse(fs.readFileSync(new URL("../../sdk/package.json", import.meta.url), "utf8"));
    const deps = Object.keys({ ...pkg.dependencies, ...pkg.peerDependencies });
    expect(deps.filter((d) => /express|prisma|pg|pglite/.test(d))).toEqual([]);
    const sources = fs.readdirSync(new URL("../../sdk/src", import.meta.url)).map((f) => fs.readFileSync(new URL(`../../sdk/src/${f}`, import.meta.url), "utf8"));
    for (const src of sources) expect(src).not.toMatch(/from "(express|@prisma|pg|\.\.\/\.\.\/server)/);
  });
});
