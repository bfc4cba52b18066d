import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isPrivateAddress } from "../server/webhooks/address-guard.js";
import { postOnce } from "../server/webhooks/send.js";
import { KeyService } from "../server/keys/keys.js";
import { startTestServer, type TestServer } from "./helpers/server.js";
import { startReceiver, type Receiver } from "./helpers/webhook-receiver.js";
import { apiClient } from "./helpers/api.js";
import { pollUntil } from "./helpers/process.js";

/**
 * Outbound webhooks never make the service call its own network for a `live`
 * endpoint (SSRF): literal private addresses and names resolving to them are
 * refused before any connection; `test` endpoints may reach them (a developer's
 * own machine), and WEBHOOK_PRIVATE_ADDRESSES changes the policy.
 */
describe("webhook address guard", () => {
  it("knows the private ranges, v4, v6 and v4-mapped", () => {
    for (const a of ["127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "::", "fd00::1", "fe80::1", "::ffff:127.0.0.1"]) {
      expect(isPrivateAddress(a), a).toBe(true);
    }
    for (const a of ["8.8.8.8", "172.32.0.1", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"]) expect(isPrivateAddress(a), a).toBe(false);
  });

  let receiver: Receiver;
  beforeAll(async () => {
    receiver = await startReceiver();
  });
  afterAll(async () => receiver?.close());

  it("refuses a literal private address and a name resolving to one, without connecting; reaches it when allowed", async () => {
    const port = new URL(receiver.url).port;
    const literal = await postOnce(receiver.url, {}, "{}", 2000, undefined, true);
    expect(literal.statusCode).toBeNull();
    expect(literal.error).toMatch(/127\.0\.0\.1 is a private address/);
    const named = await postOnce(`http://localhost:${port}/`, {}, "{}", 2000, undefined, true);
    expect(named.statusCode).toBeNull();
    expect(named.error).toMatch(/resolves to the private address/);
    expect(receiver.received).toHaveLength(0);
    const allowed = await postOnce(receiver.url, {}, "{}", 2000);
    expect(allowed.statusCode).toBe(200);
    expect(receiver.received).toHaveLength(1);
  });

  describe("through the dispatcher", () => {
    let server: TestServer;
    beforeAll(async () => {
      server = await startTestServer({ kind: "pglite", dataDir: null }, { WEBHOOK_RETRY_SCHEDULE: "0.1", WEBHOOK_TIMEOUT_MS: "500" }, { runningClock: true });
    }, 60_000);
    afterAll(async () => server?.close());

    it("a live endpoint on a loopback address gets nothing, and the delivery log says why; a test endpoint is delivered", async () => {
      const liveKey = (await new KeyService(server.db.prisma, server.clock, server.db).createKeys(server.dev.appId, "live")).appKey;
      for (const [key, env] of [
        [liveKey, "live"],
        [server.dev.appKey, "test"],
      ] as const) {
        const api = apiClient(server, key);
        expect((await api("POST", "/v1/webhook_endpoints", { url: `${receiver.url}?env=${env}`, events: ["plan.changed"] })).status).toBe(201);
        await api("POST", "/v1/plans", { slug: "pro", name: "Pro" });
        expect((await api("PUT", `/v1/users/u-${env}/plan`, { plan: "pro" })).status).toBe(200);
      }
      const live = apiClient(server, liveKey);
      const failed = await pollUntil(
        async () => (await live("GET", "/v1/webhook_deliveries")).body.data[0],
        (d) => d?.status === "failed",
        10_000,
        "the live delivery failed",
      );
      expect(failed.attempts.map((a: { error: string }) => a.error)).toEqual([expect.stringMatching(/private address/), expect.stringMatching(/private address/)]);
      const test = apiClient(server, server.dev.appKey);
      await pollUntil(async () => receiver.received.some((r) => r.path.endsWith("?env=test")), Boolean, 10_000, "the test delivery arrived").catch(async (err) => {
        throw new Error(`${err.message}: ${JSON.stringify((await test("GET", "/v1/webhook_deliveries")).body)}`);
      });
      expect(receiver.received.filter((r) => r.path.endsWith("?env=live"))).toHaveLength(0);
    });
  });
});
