import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { USER_CODE_ALPHABET } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";

/**
 * The RFC 8628 device flow, state by state, against the real server on each
 * database: what a worker's poll answers in every state, and the one-time
 * pairing token under concurrent polls.
 */
onEachDatabase("RFC 8628 device flow on $db.name", (db) => {
  let server: TestServer;
  let drop: () => Promise<void>;
  const INTERVAL = 5;

  beforeAll(async () => {
    const made = await db.create({ migrated: true });
    drop = made.drop;
    // Behind a trusted proxy each machine is its own client address, as in the field (the per-address limits are another suite's).
    server = await startTestServer(made.target, { DEVICE_POLL_INTERVAL: String(INTERVAL), TRUST_PROXY: "loopback" });
  });
  afterAll(async () => {
    await server?.close();
    await drop?.();
  });

  const json = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const machine = { hostname: "alice-laptop", platform: "linux", arch: "x64", client: "svc-worker", client_version: "0.1.0" };

  let machines = 0;
  async function newCode(pk = server.dev.connectKey) {
    const res = await server.fetch(`/c/${pk}/v1/device/code`, json(machine, { "x-forwarded-for": `10.0.${Math.floor(++machines / 250)}.${machines % 250}` }));
    expect(res.status, await res.clone().text()).toBe(200);
    return (await res.json()) as { device_code: string; user_code: string; interval: number; expires_in: number; verification_uri: string; verification_uri_complete: string; app_name: string };
  }
  const poll = (deviceCode: string, pk = server.dev.connectKey) => server.fetch(`/c/${pk}/v1/device/token`, json({ device_code: deviceCode }));
  async function session(user: string, appKey = server.dev.appKey) {
    const res = await server.fetch("/v1/end_users/session", json({ user }, bearer(appKey)));
    expect(res.status).toBe(200);
    return ((await res.json()) as { session: string }).session;
  }
  const answer = (est: string, decision: "approve" | "deny", userCode: string) => server.fetch(`/v1/device/${decision}`, json({ user_code: userCode }, bearer(est)));

  describe("", () => {
    it("issues codes as the RFC recommends: 8 letters of BCDFGHJKLMNPQRSTVWXZ shown XXXX-XXXX, a secret device code, the interval and the page", async () => {
      const seen = new Set<string>();
      for (let i = 0; i < 20; i++) {
        const c = await newCode();
        expect(c.user_code).toMatch(new RegExp(`^[${USER_CODE_ALPHABET}]{4}-[${USER_CODE_ALPHABET}]{4}$`));
        expect(c.device_code).toMatch(/^dc_[A-Za-z0-9_-]{43}$/);
        seen.add(c.user_code);
        expect(c.interval).toBe(INTERVAL);
        expect(c.expires_in).toBe(900);
        expect(c.verification_uri).toBe(`${server.url}/connect`);
        // The code rides in the fragment: no server ever logs it.
        expect(c.verification_uri_complete).toBe(`${server.url}/connect#code=${c.user_code}`);
        expect(c.app_name).toBe("Local development app");
      }
      expect(seen.size).toBe(20);
    });

    it("answers each state of the table: pending, slow_down, approved (token once), then invalid_grant", async () => {
      const c = await newCode();
      const alice = await session("alice");

      // The first poll is never early; a second one at once is.
      await expectError(await poll(c.device_code), 400, "authorization_pending");
      const slow = await expectError(await poll(c.device_code), 400, "slow_down");
      expect(slow.error.interval).toBe(INTERVAL + 5);
      // Permanently wider: a poll after the old interval is still too early, and widens it again.
      server.clock.advance(INTERVAL);
      const slower = await expectError(await poll(c.device_code), 400, "slow_down");
      expect(slower.error.interval).toBe(INTERVAL + 10);
      server.clock.advance(INTERVAL + 10);
      await expectError(await poll(c.device_code), 400, "authorization_pending");

      const approved = await answer(alice, "approve", c.user_code);
      expect(approved.status).toBe(200);
      expect(await approved.json()).toEqual({ user_code: c.user_code, status: "approved" });

      server.clock.advance(INTERVAL + 10);
      const res = await poll(c.device_code);
      expect(res.status).toBe(200);
      const token = (await res.json()) as Record<string, string>;
      expect(token).toMatchObject({ token_type: "pairing", environment: "test", server_url: server.url, app_name: "Local development app" });
      expect(token.pairing_token).toMatch(/^pt_svc_[A-Za-z0-9_-]{43}$/);
      expect(token.connect_url).toBe(`${server.url.replace(/^http/, "ws")}/v1/worker`);

      // The machine belongs to the approving session's user, with what the machine said about itself.
      const m = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: token.machine_id }, include: { endUser: true } });
      expect(m.endUser.externalId).toBe("alice");
      expect(m).toMatchObject({ hostname: "alice-laptop", platform: "linux", arch: "x64", client: "svc-worker", clientVersion: "0.1.0" });

      server.clock.advance(INTERVAL + 10);
      await expectError(await poll(c.device_code), 400, "invalid_grant");
      // The spec's short path is the same call.
      await expectError(await server.fetch("/v1/device/token", json({ device_code: c.device_code })), 400, "invalid_grant");
    });

    it("a denial: the next poll says access_denied, and keeps saying it", async () => {
      const c = await newCode();
      const alice = await session("alice");
      await expectError(await poll(c.device_code), 400, "authorization_pending");
      expect((await answer(alice, "deny", c.user_code)).status).toBe(200);
      server.clock.advance(INTERVAL);
      await expectError(await poll(c.device_code), 400, "access_denied");
      server.clock.advance(INTERVAL);
      await expectError(await poll(c.device_code), 400, "access_denied");
      // A denied request cannot be approved afterwards.
      await expectError(await answer(alice, "approve", c.user_code), 409, "already_answered");
      expect(await server.db.prisma.deviceAuthorization.count({ where: { status: "denied" } })).toBeGreaterThan(0);
    });

    it("expiry: after expires_in, polls say expired_token and the page says the code expired", async () => {
      const c = await newCode();
      const alice = await session("alice");
      server.clock.advance(c.expires_in - 1);
      await expectError(await poll(c.device_code), 400, "authorization_pending");
      server.clock.advance(1);
      await expectError(await poll(c.device_code), 400, "expired_token");
      const fresh = await session("alice");
      await expectError(await server.fetch(`/v1/device/lookup?code=${c.user_code}`, { headers: bearer(fresh) }), 410, "expired");
      await expectError(await answer(fresh, "approve", c.user_code), 410, "expired");
      void alice;
    });

    it("an approved code that expires before the poll yields no token", async () => {
      const c = await newCode();
      expect((await answer(await session("alice"), "approve", c.user_code)).status).toBe(200);
      server.clock.advance(c.expires_in);
      await expectError(await poll(c.device_code), 400, "expired_token");
      expect(await server.db.prisma.deviceAuthorization.count({ where: { status: "consumed", userCodeHash: { not: "" }, machineId: null } })).toBe(0);
    });

    it("unknown device codes are invalid_grant and change nothing", async () => {
      await expectError(await poll("dc_made_up"), 400, "invalid_grant");
      await expectError(await server.fetch("/v1/device/token", json({ device_code: "dc_made_up" })), 400, "invalid_grant");
    });

    it("user codes are entered case- and dash-insensitively", async () => {
      const alice = await session("alice");
      for (const form of [(u: string) => u.toLowerCase(), (u: string) => u.replace("-", ""), (u: string) => ` ${u.replace("-", " ").toLowerCase()} `]) {
        const c = await newCode();
        const res = await server.fetch(`/v1/device/lookup?code=${encodeURIComponent(form(c.user_code))}`, { headers: bearer(alice) });
        expect(res.status).toBe(200);
        expect(await res.json()).toMatchObject({ user_code: c.user_code, hostname: "alice-laptop", platform: "linux", arch: "x64", client: "svc-worker", client_version: "0.1.0" });
        const ok = await answer(alice, "approve", form(c.user_code));
        expect(await ok.json()).toEqual({ user_code: c.user_code, status: "approved" });
      }
    });

    it("a request is answered once: a second approve or deny is 409 (to another user of the app, 404 like an unknown code) and changes nothing", async () => {
      const c = await newCode();
      const alice = await session("alice");
      const bob = await session("bob");
      expect((await answer(alice, "approve", c.user_code)).status).toBe(200);
      await expectError(await answer(alice, "approve", c.user_code), 409, "already_answered");
      await expectError(await answer(alice, "deny", c.user_code), 409, "already_answered");
      await expectError(await server.fetch(`/v1/device/lookup?code=${c.user_code}`, { headers: bearer(alice) }), 409, "already_answered");
      // Alice's code now: to Bob it is as unknown as a made-up one (no hint that someone paired with it).
      await expectError(await answer(bob, "approve", c.user_code), 404, "not_found");
      await expectError(await answer(bob, "deny", c.user_code), 404, "not_found");
      await expectError(await server.fetch(`/v1/device/lookup?code=${c.user_code}`, { headers: bearer(bob) }), 404, "not_found");
      server.clock.advance(INTERVAL);
      const res = await poll(c.device_code);
      const { machine_id } = (await res.json()) as { machine_id: string };
      const m = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: machine_id }, include: { endUser: true } });
      expect(m.endUser.externalId).toBe("alice");
    });

    it("concurrent approve and deny: exactly one wins", async () => {
      const c = await newCode();
      const [a, b] = [await session("alice"), await session("bob")];
      const answers = await Promise.all([answer(a, "approve", c.user_code), answer(b, "deny", c.user_code), answer(a, "approve", c.user_code), answer(b, "deny", c.user_code)]);
      // The losers: 409 for the winner's own session, and for the other's 409 or (once the winner's answer is in) 404 like an unknown code.
      const statuses = answers.map((r) => r.status);
      expect(statuses.filter((s) => s === 200)).toHaveLength(1);
      const winner = statuses.indexOf(200) % 2; // 0: alice's session, 1: bob's
      statuses.forEach((s, i) => s !== 200 && expect(i % 2 === winner ? [409] : [404, 409]).toContain(s));
    });

    it("the device code yields its token exactly once under 25 concurrent polls", async () => {
      const c = await newCode();
      expect((await answer(await session("alice"), "approve", c.user_code)).status).toBe(200);
      const before = await server.db.prisma.machine.count();
      const polls = await Promise.all(Array.from({ length: 25 }, () => poll(c.device_code)));
      const bodies = await Promise.all(polls.map(async (r) => ({ status: r.status, body: (await r.json()) as { pairing_token?: string; error?: { code: string } } })));
      const won = bodies.filter((b) => b.status === 200);
      expect(won).toHaveLength(1);
      expect(won[0].body.pairing_token).toMatch(/^pt_svc_/);
      // The losers saw the code already used (or were told to slow down first); never a second token.
      for (const b of bodies.filter((b) => b.status !== 200)) expect(["invalid_grant", "slow_down"]).toContain(b.body.error!.code);
      expect(await server.db.prisma.machine.count()).toBe(before + 1);
    });

    it("bad input is a clear 400 and stores nothing", async () => {
      const before = await server.db.prisma.deviceAuthorization.count();
      const bad = await server.fetch(`/c/${server.dev.connectKey}/v1/device/code`, json({ hostname: "", platform: "linux", arch: "x64", client: "w" }));
      expect((await expectError(bad, 400, "invalid_request")).error.param).toBe("hostname");
      await expectError(await server.fetch(`/c/${server.dev.connectKey}/v1/device/code`, json({ hostname: "h" })), 400, "invalid_request");
      await expectError(await server.fetch(`/c/${server.dev.connectKey}/v1/device/token`, json({})), 400, "invalid_request");
      const alice = await session("alice");
      const malformed = await expectError(await server.fetch("/v1/device/lookup?code=hello", { headers: bearer(alice) }), 400, "invalid_request");
      expect(malformed.error.param).toBe("code");
      expect((await expectError(await answer(alice, "approve", "BCDF-GHJA"), 400, "invalid_request")).error.param).toBe("user_code");
      expect(await server.db.prisma.deviceAuthorization.count()).toBe(before);
    });
  });
});
