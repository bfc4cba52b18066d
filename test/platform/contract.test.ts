import { describe, expect, it } from "vitest";
import { contract, ERROR_CODES, ErrorEnvelope, type RouteMetadata } from "@svc/contract";

// The 19 endpoints of spec/api.md section 4, exactly as written there.
const SPEC_ENDPOINTS: [string, string, RouteMetadata["auth"]][] = [
  ["POST", "/v1/chat/completions", "appKey"],
  ["POST", "/v1/runs", "appKey"],
  ["POST", "/v1/runs/:id/tool_result", "appKey"],
  ["POST", "/v1/runs/:id/approval", "appKey"],
  ["POST", "/v1/runs/:id/cancel", "appKey"],
  ["POST", "/v1/runs/:id/usage", "appKey"],
  ["POST", "/c/:pk/v1/device/code", "connectKey"],
  ["POST", "/c/:pk/v1/device/token", "connectKey"],
  ["POST", "/v1/end_users/session", "appKey"],
  ["DELETE", "/v1/end_users/session", "appKey"],
  ["GET", "/v1/connect", "session"],
  ["GET", "/v1/device/lookup", "session"],
  ["POST", "/v1/device/approve", "session"],
  ["POST", "/v1/device/deny", "session"],
  ["GET", "/v1/machines", "session"],
  ["GET", "/v1/users/:id", "appKey"],
  ["GET", "/v1/users/:id/compute", "appKey"],
  ["GET", "/v1/usage", "appKey"],
  ["GET", "/v1/plans", "appKey"],
];

const routes = Object.values(contract);

describe("contract", () => {
  it.each(SPEC_ENDPOINTS)("has %s %s with the credential the spec names", (method, path, auth) => {
    const route = routes.find((r) => r.method === method && r.path === path);
    expect(route, `${method} ${path}`).toBeDefined();
    expect((route!.metadata as RouteMetadata).auth).toBe(auth);
  });

  it("declares the error statuses every route can answer, all in the envelope", () => {
    for (const route of routes) {
      const meta = route.metadata as RouteMetadata;
      const statuses = Object.keys(route.responses).map(Number);
      for (const s of [400, 404, 413, 415, 429, 500]) expect(statuses, `${route.path} ${s}`).toContain(s);
      if (meta.auth === "appKey" || meta.auth === "session" || meta.auth === "connectKey") expect(statuses).toContain(401);
      if (meta.notBuiltYet) expect(statuses).toContain(501);
      for (const s of statuses.filter((s) => s >= 400)) {
        expect((route.responses as Record<number, unknown>)[s], `${route.method} ${route.path} ${s}`).toBe(ErrorEnvelope);
      }
    }
  });

  it("maps every error code to one client or server error status", () => {
    for (const [code, e] of Object.entries(ERROR_CODES)) {
      expect(e.status, code).toBeGreaterThanOrEqual(400);
      expect(e.status, code).toBeLessThan(600);
    }
    expect(ERROR_CODES.serve_in_app.status).toBe(409);
    expect(ERROR_CODES.allowance_exhausted.status).toBe(402);
    expect(ERROR_CODES.not_implemented.status).toBe(501);
  });
});
