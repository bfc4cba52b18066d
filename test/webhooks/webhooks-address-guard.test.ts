import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isPrivateAddress } from "../../server/webhooks/address-guard.js";
import { postOnce } from "../../server/webhooks/send.js";
import { parseConfig } from "../../server/config.js";
import { openDatabase } from "../../server/db/open.js";
import { migrate, readMigrations } from "../../server/db/migrate.js";
import { KeyService } from "../../server/keys/keys.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { startReceiver, type Receiver } from "../helpers/webhook-receiver.js";
import { apiClient } from "../helpers/api.js";
import { pollUntil } from "../helpers/process.js";

/**
 * Outbound webhooks never make the service call its own network (SSRF) unless the
 * operator allows it: by default, in every environment, literal private or
 * special-purpose addresses and names resolving to them are refused before any
 * connection; WEBHOOK_PRIVATE_ADDRESSES=test lets `test` endpoints reach them (a
 * developer's own machine), `all` every endpoint. Redirects are never followed, and
 * the delivery log never says where one pointed.
 */

/**
 * Written out here from IANA's IPv4 and IPv6 special-purpose address registries (and
 * multicast, the address space registries' reserved blocks), independently of the
 * guard's own table: the first and the last address of each block, and a few inside.
 */
const REFUSED = [
  // IPv4 special-purpose registry
  "0.0.0.0", "0.255.255.255", "10.0.0.0", "10.255.255.255", "100.64.0.0", "100.127.255.255", "127.0.0.1", "127.255.255.255",
  "169.254.0.0", "169.254.169.254", "169.254.255.255", "172.16.0.0", "172.31.255.255",
  "192.0.0.0", "192.0.0.8", "192.0.0.9", "192.0.0.10", "192.0.0.170", "192.0.0.171", "192.0.0.255",
  "192.0.2.0", "192.0.2.255", "192.31.196.1", "192.52.193.1", "192.88.99.1", "192.168.0.0", "192.168.255.255", "192.175.48.1",
  "198.18.0.0", "198.18.0.1", "198.19.255.255", "198.51.100.0", "198.51.100.255", "203.0.113.0", "203.0.113.255",
  "240.0.0.0", "240.0.0.1", "254.255.255.255", "255.255.255.255",
  // multicast
  "224.0.0.1", "239.255.255.255",
  // IPv6 special-purpose registry
  "::", "::1", "::ffff:0:0", "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:8.8.8.8", "::ffff:169.254.169.254", "::127.0.0.1",
  "64:ff9b::", "64:ff9b::8.8.8.8", "64:ff9b::a00:1", "64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
  "100::", "100::ffff:ffff:ffff:ffff", "100:0:0:1::1",
  "2001::", "2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:1::1", "2001:1::2", "2001:1::3", "2001:2::1", "2001:3::1", "2001:4:112::1",
  "2001:10::1", "2001:20::1", "2001:30::1", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
  "2001:db8::", "2001:db8::1", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
  "2002::", "2002:a00:1::1", "2002:808:808::1", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
  "2620:4f:8000::1", "3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "5f00::1", "5f00:ffff::1",
  "fc00::", "fd00::1", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::", "fe80::1", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::1",
  "ff00::", "ff02::1", "ff05::1:3", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
  // reserved outside global unicast
  "4000::1", "1::1",
];
/** Public unicast addresses, some right next to a refused block. */
const PUBLIC = [
  "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.0",
  "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.0.1.0", "192.0.3.0", "192.88.98.255", "192.167.255.255", "192.169.0.0",
  "198.17.255.255", "198.20.0.0", "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0", "223.255.255.255",
  "2001:200::1", "2001:4860:4860::8888", "2001:db7:ffff::1", "2001:db9::1", "2003::1", "2606:4700::1111", "2a00:1450:4001::1", "3ffe::1", "3fff:1000::1",
];

describe("webhook address guard", () => {
  it("refuses every special-purpose block of IANA's IPv4 and IPv6 registries, multicast and reserved space; passes public unicast", () => {
    expect(REFUSED.filter((a) => !isPrivateAddress(a))).toEqual([]);
    expect(PUBLIC.filter((a) => isPrivateAddress(a))).toEqual([]);
    expect(isPrivateAddress("[::1]")).toBe(true);
    expect(isPrivateAddress("example.com")).toBe(false);
  });

  it("refuses private addresses by default in every environment (WEBHOOK_PRIVATE_ADDRESSES defaults to none)", () => {
    expect(parseConfig({}).webhooks.privateAddresses).toBe("none");
    expect(parseConfig({ WEBHOOK_PRIVATE_ADDRESSES: "test" }).webhooks.privateAddresses).toBe("test");
  });

  let receiver: Receiver;
  let redirector: { url: string; hits: string[]; close(): Promise<void> };
  beforeAll(async () => {
    receiver = await startReceiver();
    // A target that redirects into the service's network: where it points must never show.
    const hits: string[] = [];
    const server = http.createServer((req, res) => {
      hits.push(req.url ?? "/");
      req.resume();
      res.writeHead(307, { location: `${receiver.url}?from=redirect&secret-internal-path=1` }).end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    redirector = {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
      hits,
      close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
    };
  });
  afterAll(async () => {
    await receiver?.close();
    await redirector?.close();
  });

  it("refuses literal private addresses in every spelling and names resolving to one, without connecting; reaches them only when allowed", async () => {
    const port = new URL(receiver.url).port;
    const before = receiver.received.length;
    for (const url of [
      receiver.url,
      `http://[::1]:${port}/`,
      `http://[::ffff:127.0.0.1]:${port}/`,
      `http://2130706433:${port}/`,
      `http://0x7f.1:${port}/`,
      `http://127.1:${port}/`,
      `http://0.0.0.0:${port}/`,
    ]) {
      const r = await postOnce(url, {}, "{}", 2000, undefined, true);
      expect({ url, statusCode: r.statusCode }).toEqual({ url, statusCode: null });
      expect(r.error, url).toMatch(/is a private or special-purpose address/);
    }
    const named = await postOnce(`http://localhost:${port}/`, {}, "{}", 2000, undefined, true);
    expect(named.statusCode).toBeNull();
    expect(named.error).toMatch(/localhost resolves to a private or special-purpose address/);
    // The refusal does not say which address the name resolved to.
    expect(named.error).not.toMatch(/127\.0\.0\.1|::1/);
    expect(receiver.received.length).toBe(before);

    const allowed = await postOnce(receiver.url, {}, "{}", 2000);
    expect(allowed.statusCode).toBe(200);
    expect(receiver.received.length).toBe(before + 1);
  });

  it("a kept-alive connection opened for an allowed attempt is never reused by a guarded one", async () => {
    const port = new URL(receiver.url).port;
    const before = receiver.received.length;
    expect((await postOnce(`http://localhost:${port}/warm`, {}, "{}", 2000)).statusCode).toBe(200);
    const guarded = await postOnce(`http://localhost:${port}/again`, {}, "{}", 2000, undefined, true);
    expect(guarded.statusCode).toBeNull();
    expect(guarded.error).toMatch(/resolves to a private or special-purpose address/);
    expect(receiver.received.slice(before).map((r) => r.path)).toEqual(["/warm"]);
  });

  it("never follows a redirect, and never says where it pointed", async () => {
    const before = receiver.received.length;
    const r = await postOnce(redirector.url, {}, "{}", 2000);
    expect(r).toMatchObject({ statusCode: 307, error: "HTTP 307: redirects are not followed" });
    expect(receiver.received.length).toBe(before);
  });

  it("attempts logged before this version lose a redirect's target and the private address a name resolved to (migration)", async () => {
    const db = await openDatabase({ kind: "pglite", dataDir: null });
    try {
      const all = readMigrations();
      const at = all.findIndex((m) => m.name.endsWith("_webhook_log_redirect_scrub"));
      expect(at).toBeGreaterThan(0);
      await migrate(db, all.slice(0, at));
      await db.exec(`INSERT INTO apps (id, name) VALUES ('app_old', 'Old');
        INSERT INTO webhook_endpoints (id, app_id, environment, url, secret) VALUES ('we_old', 'app_old', 'test', 'http://hooks.example/', 'sealed');
        INSERT INTO webhook_deliveries (id, app_id, environment, endpoint_id, event_type, payload, event_key, last_error) VALUES
          ('msg_1', 'app_old', 'test', 'we_old', 'plan.changed', '{}', 'k1', 'HTTP 302: redirects are not followed (to http://10.0.0.5/admin?token=x)'),
          ('msg_2', 'app_old', 'test', 'we_old', 'plan.changed', '{}', 'k2', 'EPRIVATE: db.internal resolves to the private address 10.0.3.4 (live endpoints may only reach public ones)'),
          ('msg_3', 'app_old', 'test', 'we_old', 'plan.changed', '{}', 'k3', 'HTTP 500');
        INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms) VALUES
          ('msg_1', 1, now(), 302, 'HTTP 302: redirects are not followed (to http://10.0.0.5/admin?token=x)', 3),
          ('msg_2', 1, now(), NULL, 'EPRIVATE: db.internal resolves to the private address 10.0.3.4 (live endpoints may only reach public ones)', 1),
          ('msg_3', 1, now(), 500, 'HTTP 500', 2);`);
      await migrate(db, all);
      const deliveries = await db.query<{ id: string; last_error: string }>(`SELECT id, last_error FROM webhook_deliveries ORDER BY id`);
      const attempts = await db.query<{ delivery_id: string; error: string }>(`SELECT delivery_id, error FROM webhook_attempts ORDER BY delivery_id`);
      const expected = [
        "HTTP 302: redirects are not followed",
        "EPRIVATE: db.internal resolves to a private address (live endpoints may only reach public ones)",
        "HTTP 500",
      ];
      expect(deliveries.map((d) => d.last_error)).toEqual(expected);
      expect(attempts.map((a) => a.error)).toEqual(expected);
    } finally {
      await db.close();
    }
  });

  describe.each([
    { policy: undefined, testReaches: false },
    { policy: "test", testReaches: true },
  ])("through the dispatcher, WEBHOOK_PRIVATE_ADDRESSES=$policy", ({ policy, testReaches }) => {
    let server: TestServer;
    beforeAll(async () => {
      server = await startTestServer(
        { kind: "pglite", dataDir: null },
        { WEBHOOK_RETRY_SCHEDULE: "0.1", WEBHOOK_TIMEOUT_MS: "500", ...(policy ? { WEBHOOK_PRIVATE_ADDRESSES: policy } : {}) },
        { runningClock: true },
      );
    }, 60_000);
    afterAll(async () => server?.close());

    it(`a live endpoint on a loopback address gets nothing${testReaches ? "; a test endpoint is delivered" : ", nor does a test endpoint"}; the log says why and never where a redirect pointed`, async () => {
      const liveKey = (await new KeyService(server.db.prisma, server.clock, server.db).createKeys(server.dev.appId, "live")).appKey;
      const tag = `p-${policy ?? "default"}`;
      for (const [key, env] of [
        [liveKey, "live"],
        [server.dev.appKey, "test"],
      ] as const) {
        const api = apiClient(server, key);
        expect((await api("POST", "/v1/webhook_endpoints", { url: `${receiver.url}?env=${env}&${tag}`, events: ["plan.changed"] })).status).toBe(201);
        expect((await api("POST", "/v1/webhook_endpoints", { url: `${redirector.url}?env=${env}&${tag}`, events: ["plan.changed"] })).status).toBe(201);
        await api("POST", "/v1/plans", { slug: "pro", name: "Pro" });
        expect((await api("PUT", `/v1/users/u-${env}/plan`, { plan: "pro" })).status).toBe(200);
      }
      const settled = async (key: string, n: number) =>
        pollUntil(
          async () => (await apiClient(server, key)("GET", "/v1/webhook_deliveries")).body.data as { status: string; lastError: string | null; attempts: { error: string | null; statusCode: number | null }[] }[],
          (ds) => ds.length === n && ds.every((d) => d.status !== "pending"),
          15_000,
          `${n} deliveries settled`,
        );
      const live = await settled(liveKey, 2);
      for (const d of live) {
        expect(d.status).toBe("failed");
        expect(d.attempts.map((a) => a.statusCode)).toEqual([null, null]);
        for (const a of d.attempts) expect(a.error).toMatch(/is a private or special-purpose address/);
      }
      const test = await settled(server.dev.appKey, 2);
      if (testReaches) {
        expect(test.map((d) => d.status).sort()).toEqual(["delivered", "failed"]);
        const redirected = test.find((d) => d.status === "failed")!;
        expect(redirected.attempts.map((a) => a.statusCode)).toEqual([307, 307]);
        expect(redirected.lastError).toBe("HTTP 307: redirects are not followed");
      } else {
        for (const d of test) {
          expect(d.status).toBe("failed");
          for (const a of d.attempts) expect(a.error).toMatch(/is a private or special-purpose address/);
        }
      }
      // Wherever the redirect pointed, the log never shows it.
      const log = JSON.stringify([live, test]);
      expect(log).not.toContain("secret-internal-path");
      expect(log).not.toContain("from=redirect");
      const arrived = receiver.received.filter((r) => r.path.includes(tag));
      expect(arrived.map((r) => r.path)).toEqual(testReaches ? [expect.stringContaining("env=test")] : []);
      expect(redirector.hits.filter((h) => h.includes(tag) && h.includes("env=live"))).toEqual([]);
    });
  });
});
