import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";
import { tableCounts } from "../helpers/snapshot.js";

/** Bad input of every kind gets the right 4xx in the envelope, never HTML or a stack trace, and changes nothing. */
onEachDatabase("error envelope on $db.name", (db) => {
  let server: TestServer;
  let drop: () => Promise<void>;
  let key: Record<string, string>;

  beforeAll(async () => {
    const made = await db.create({ migrated: true });
    drop = made.drop;
    server = await startTestServer(made.target, { MAX_BODY_BYTES: "4096" });
    key = bearer(server.dev.appKey);
  });
  afterAll(async () => {
    await server?.close();
    await drop?.();
  });

  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    server.fetch(path, { method: "POST", headers: { ...key, "content-type": "application/json", ...headers }, body });

  describe("bad input", () => {
    let before: Record<string, number>;
    beforeAll(async () => {
      before = await tableCounts(server.db);
    });
    afterAll(async () => {
      expect(await tableCounts(server.db)).toEqual(before);
    });

    it("unknown route: 404 route_not_found", async () => {
      await expectError(await server.fetch("/v1/nope", { headers: key }), 404, "route_not_found");
      await expectError(await server.fetch("/", {}), 404, "route_not_found");
      await expectError(await server.fetch("/v2/runs", { method: "POST" }), 404, "route_not_found");
    });

    it("wrong method: 405 with Allow", async () => {
      const res = await server.fetch("/v1/runs", { method: "GET", headers: key });
      expect(res.headers.get("allow")).toBe("POST");
      await expectError(res, 405, "method_not_allowed");
      const res2 = await server.fetch("/v1/end_users/session", { method: "PUT", headers: key });
      expect(res2.headers.get("allow")).toBe("POST, DELETE");
      await expectError(res2, 405, "method_not_allowed");
      await expectError(await server.fetch("/v1/openapi.json", { method: "POST" }), 405, "method_not_allowed");
    });

    it("malformed JSON: 400 invalid_json", async () => {
      await expectError(await post("/v1/runs", "{not json"), 400, "invalid_json");
      await expectError(await post("/v1/runs", '{"user":"u1",'), 400, "invalid_json");
      await expectError(await post("/v1/runs", '"a string"'), 400, "invalid_json");
    });

    it("wrong content type: 415", async () => {
      await expectError(await post("/v1/runs", "user=u1&prompt=hi", { "content-type": "application/x-www-form-urlencoded" }), 415, "unsupported_media_type");
      await expectError(await post("/v1/runs", '{"user":"u1","prompt":"hi"}', { "content-type": "text/plain" }), 415, "unsupported_media_type");
      await expectError(
        await server.fetch("/v1/runs", { method: "POST", headers: key, body: new Blob(['{"user":"u1","prompt":"hi"}']) }),
        415,
        "unsupported_media_type",
      );
    });

    it("oversized body: 413", async () => {
      await expectError(await post("/v1/runs", JSON.stringify({ user: "u1", prompt: "x".repeat(10_000) })), 413, "payload_too_large");
    });

    it("schema violations: 400 invalid_request naming the field", async () => {
      const missing = await expectError(await post("/v1/runs", JSON.stringify({ prompt: "hi" })), 400, "invalid_request");
      expect(missing.error.param).toBe("user");
      const wrongType = await expectError(await post("/v1/runs", JSON.stringify({ user: 5, prompt: "hi" })), 400, "invalid_request");
      expect(wrongType.error.message).toMatch(/user/);
      await expectError(await post("/v1/runs", JSON.stringify({ user: "u1", prompt: "hi", route: { prefer: ["cloud"] } })), 400, "invalid_request");
      await expectError(await post("/v1/runs/run_1/tool_result", JSON.stringify({ result: 1 })), 400, "invalid_request");
      await expectError(await server.fetch("/v1/usage?period=last-month", { headers: key }), 400, "invalid_request");
      await expectError(await server.fetch("/v1/usage?limit=0", { headers: key }), 400, "invalid_request");
      await expectError(await server.fetch("/v1/end_users/session", { method: "DELETE", headers: key }), 400, "invalid_request");
    });

    it("credential problems are checked before the body", async () => {
      await expectError(await post("/v1/runs", "{not json", { authorization: "Bearer sk_svc_bad" }), 400, "invalid_json");
      await expectError(await post("/v1/runs", JSON.stringify({ nope: 1 }), { authorization: "Bearer sk_svc_bad" }), 401, "invalid_credential");
    });
  });

  it("a crash is a 500 envelope with a request id, logged with that id, no stack trace", async () => {
    // Make the data layer fail under a request: drop the table the app key check reads.
    const victim = await server.services.keys.createApp("Crash", "test");
    await server.db.exec(`ALTER TABLE "app_keys" RENAME TO "app_keys_away"`);
    try {
      const res = await server.fetch("/v1/plans", { headers: bearer(victim.appKey) });
      const body = await expectError(res, 500, "internal_error");
      expect(body.error.message).not.toMatch(/app_keys|prisma|relation/i);
      const logged = server.logs.map((l) => JSON.parse(l)).find((l) => l.requestId === body.error.requestId && l.level >= 50);
      expect(logged, "the crash is logged with the request id").toBeDefined();
      expect(JSON.stringify(logged)).not.toContain(victim.appKey.split(".")[1]);
    } finally {
      await server.db.exec(`ALTER TABLE "app_keys_away" RENAME TO "app_keys"`);
    }
  });
});
