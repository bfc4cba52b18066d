import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer, expectError, requestInit, ROUTE_CASES, type RouteCase } from "../helpers/requests.js";
import { SessionService } from "../../server/sessions/sessions.js";
import { tableCounts } from "../helpers/snapshot.js";
import { contract, type RouteMetadata } from "@svc/contract";
import { signInOwner } from "../helpers/owner.js";
import { OwnerSessions, OWNER_SESSION_ABSOLUTE_SECONDS } from "../../server/owners/sessions.js";

/** Routes taking no header credential because their body is one (a password, a sign-in link, an invitation): the fixture's made-up one is 401 `invalid_credential`. */
const BODY_CREDENTIAL = new Set(["ownerSignIn", "ownerSignInWithLink", "ownerAcceptInvite"]);

const ROUTES_NOT_BUILT = new Set(Object.entries(contract).filter(([, r]) => (r.metadata as RouteMetadata).notBuiltYet).map(([name]) => name));

/**
 * Every route x every credential kind, valid and invalid. Each route takes exactly
 * the credential its spec line names: with it the request passes (501 while the
 * route is not built), with anything else it is refused in the envelope and changes nothing.
 */
onEachDatabase("credential matrix on $db.name", (db) => {
  let server: TestServer;
  const creds: Record<string, string> = {};
  const pk: Record<string, string> = {};

  beforeAll(async () => {
    server = await startTestServerOn(db);
    const { keys } = server.services;
    creds.appKey = server.dev.appKey;
    const [, id] = /^sk_svc_([a-z0-9]+)\./.exec(creds.appKey)!;
    creds.appKeyWrongSecret = `sk_svc_${id}.${"A".repeat(43)}`;
    creds.appKeyUnknown = `sk_svc_${"0".repeat(16)}.${"A".repeat(43)}`;
    const revoked = await keys.createApp("Revoked", "test");
    await keys.revoke(revoked.appKey);
    await keys.revoke(revoked.connectKey);
    creds.appKeyRevoked = revoked.appKey;
    const rotated = await keys.createApp("Rotated", "test");
    await keys.rotate(rotated.appKey, 0);
    creds.appKeyRotatedOut = rotated.appKey;
    const live = await keys.createApp("Live app", "live");
    creds.appKeyLive = live.appKey;

    const tenant = { appId: server.dev.appId, environment: "test" as const };
    creds.session = (await server.services.sessions.mint(tenant, "u1")).token;
    const earlier = new SessionService(server.db.prisma, { now: () => new Date(server.clock.now().getTime() - 11 * 60_000) });
    creds.sessionExpired = (await earlier.mint(tenant, "u1")).token;
    creds.sessionEnded = (await server.services.sessions.mint(tenant, "u2")).token;
    await server.db.prisma.endUserSession.updateMany({ where: { endUser: { externalId: "u2" } }, data: { endedAt: server.clock.now() } });
    creds.sessionUnknown = `est_${"A".repeat(43)}`;
    creds.pairingToken = `pt_svc_${"A".repeat(43)}`;
    creds.connectKeyInHeader = server.dev.connectKey;

    // Owner sessions (the dashboard's cookie): one ended, one past its absolute lifetime, one unknown, one malformed.
    const ownerAccount = await server.services.owners.accounts.create({ email: "matrix-owner@example.com" });
    const ended = await server.services.owners.sessions.start(ownerAccount.id);
    await server.services.owners.sessions.end(ended.sessionId);
    creds.ownerEnded = `svc_owner=${ended.token}`;
    const longAgo = new OwnerSessions(server.db.prisma, { now: () => new Date(server.clock.now().getTime() - (OWNER_SESSION_ABSOLUTE_SECONDS + 60) * 1000) });
    creds.ownerExpired = `svc_owner=${(await longAgo.start(ownerAccount.id)).token}`;
    creds.ownerUnknown = `svc_owner=ost_${"A".repeat(43)}`;
    creds.ownerMalformed = "svc_owner=not-a-session";
    const bystander = await signInOwner(server);
    creds.ownerCookie = bystander.cookie;

    pk.valid = server.dev.connectKey;
    pk.unknown = `pk_svc_${"0".repeat(24)}`;
    pk.malformed = "not-a-key";
    pk.revoked = revoked.connectKey;
    pk.rotatedOut = rotated.connectKey;
    await keys.rotate(rotated.connectKey, 0);
  });

  afterAll(async () => {
    await server?.close();
  });

  const send = (c: RouteCase, headers: Record<string, string>, connectKey = pk.valid) =>
    server.fetch(c.path.replace("{pk}", connectKey), requestInit(c, headers));
  /** The right credential, valid: authentication passes. A route not built yet then says so (501); a built one answers anything but 401. */
  const passes = async (c: RouteCase, res: Response) => {
    if (ROUTES_NOT_BUILT.has(c.name)) return void (await expectError(res, 501, "not_implemented"));
    if (BODY_CREDENTIAL.has(c.name)) return void (await expectError(res, 401, "invalid_credential"));
    const text = await res.text();
    expect(res.status, text).not.toBe(401);
    expect(res.status, text).toBeLessThan(500);
  };

  const headerRoutes = ROUTE_CASES.filter((c) => c.auth === "appKey" || c.auth === "session");

  describe("routes taking a bearer credential", () => {
    it.each(headerRoutes)("$method $path ($auth): only its own valid credential passes", async (c) => {
      const own = c.auth === "appKey" ? "appKey" : "session";
      await passes(c, await send(c, bearer(creds[own])));
      // The dashboard's cookie beside the right credential changes nothing; alone it is no credential here.
      await passes(c, await send(c, { ...bearer(creds[own]), cookie: creds.ownerCookie }));
      if (c.auth === "appKey") await passes(c, await send(c, bearer(creds.appKeyLive)));
      // Every refusal below changes nothing.
      const before = await tableCounts(server.db);

      await expectError(await send(c, {}), 401, "missing_credential");
      await expectError(await send(c, { cookie: creds.ownerCookie }), 401, "missing_credential");
      await expectError(await send(c, { authorization: "" }), 401, "missing_credential");
      await expectError(await send(c, { authorization: "Basic dXNlcjpwYXNz" }), 401, "invalid_credential");
      await expectError(await send(c, bearer("nonsense")), 401, "invalid_credential");

      const wrongKinds = ["pairingToken", "connectKeyInHeader", c.auth === "appKey" ? "session" : "appKey"];
      for (const kind of wrongKinds) await expectError(await send(c, bearer(creds[kind])), 401, "wrong_credential_kind");

      if (c.auth === "appKey") {
        await expectError(await send(c, bearer(creds.appKeyWrongSecret)), 401, "invalid_credential");
        await expectError(await send(c, bearer(creds.appKeyUnknown)), 401, "invalid_credential");
        await expectError(await send(c, bearer(`${creds.appKey}x`)), 401, "invalid_credential");
        await expectError(await send(c, bearer(creds.appKeyRevoked)), 401, "revoked_credential");
        await expectError(await send(c, bearer(creds.appKeyRotatedOut)), 401, "revoked_credential");
        for (const kind of ["sessionExpired", "sessionUnknown"]) await expectError(await send(c, bearer(creds[kind])), 401, "wrong_credential_kind");
      } else {
        await expectError(await send(c, bearer(creds.sessionExpired)), 401, "session_expired");
        await expectError(await send(c, bearer(creds.sessionEnded)), 401, "session_expired");
        await expectError(await send(c, bearer(creds.sessionUnknown)), 401, "invalid_credential");
        await expectError(await send(c, bearer("est_short")), 401, "invalid_credential");
        for (const kind of ["appKeyRevoked", "appKeyLive"]) await expectError(await send(c, bearer(creds[kind])), 401, "wrong_credential_kind");
      }
      expect(await tableCounts(server.db)).toEqual(before);
    });
  });

  const pathRoutes = ROUTE_CASES.filter((c) => c.auth === "connectKey");

  describe("routes taking the connect key in the path", () => {
    it.each(pathRoutes)("$method $path: a live connect key and no header passes", async (c) => {
      await passes(c, await send(c, {}, pk.valid));
      await passes(c, await send(c, { cookie: creds.ownerCookie }, pk.valid));
      const before = await tableCounts(server.db);
      await expectError(await send(c, {}, pk.unknown), 401, "invalid_credential");
      await expectError(await send(c, {}, pk.malformed), 401, "invalid_credential");
      await expectError(await send(c, {}, pk.revoked), 401, "revoked_credential");
      await expectError(await send(c, {}, pk.rotatedOut), 401, "revoked_credential");
      for (const kind of ["appKey", "session", "pairingToken", "connectKeyInHeader"]) {
        await expectError(await send(c, bearer(creds[kind]), pk.valid), 401, "wrong_credential_kind");
      }
      expect(await tableCounts(server.db)).toEqual(before);
    });
  });

  const openRoutes = ROUTE_CASES.filter((c) => c.auth === "none");

  describe("routes taking no credential", () => {
    it.each(openRoutes)("$method $path: refuses any credential", async (c) => {
      await passes(c, await send(c, {}));
      await passes(c, await send(c, { cookie: creds.ownerCookie }));
      for (const kind of ["appKey", "session", "pairingToken"]) await expectError(await send(c, bearer(creds[kind])), 401, "wrong_credential_kind");
    });
  });

  const ownerRoutes = ROUTE_CASES.filter((c) => c.auth === "owner");

  describe("routes taking the dashboard's session cookie", () => {
    it.each(ownerRoutes)("$method $path: only a live owner session passes, with X-CSRF-Token unless a GET", async (c) => {
      // A fresh owner each time: signing out and changing the password end sessions.
      const o = await signInOwner(server);
      const safe = c.method === "GET" || c.method === "HEAD";
      const csrf: Record<string, string> = safe ? {} : { "x-csrf-token": o.csrf };
      await passes(c, await send(c, { cookie: o.cookie, ...csrf }));
      const fresh = await signInOwner(server);
      const before = await tableCounts(server.db);
      const cookie: Record<string, string> = { cookie: fresh.cookie, ...(safe ? {} : { "x-csrf-token": fresh.csrf }) };
      await expectError(await send(c, safe ? {} : { "x-csrf-token": fresh.csrf }), 401, "missing_credential");
      await expectError(await send(c, { cookie: "other=1" }), 401, "missing_credential");
      for (const kind of ["ownerEnded", "ownerExpired"]) await expectError(await send(c, { cookie: creds[kind] }), 401, "session_expired");
      for (const kind of ["ownerUnknown", "ownerMalformed"]) await expectError(await send(c, { cookie: creds[kind] }), 401, "invalid_credential");
      // Any Authorization header is the wrong kind, even beside a live cookie and even a valid credential.
      for (const kind of ["appKey", "session", "pairingToken", "connectKeyInHeader", "appKeyLive"]) {
        await expectError(await send(c, bearer(creds[kind])), 401, "wrong_credential_kind");
        await expectError(await send(c, { ...cookie, ...bearer(creds[kind]) }), 401, "wrong_credential_kind");
      }
      if (!safe) {
        await expectError(await send(c, { cookie: fresh.cookie }), 403, "forbidden");
        await expectError(await send(c, { cookie: fresh.cookie, "x-csrf-token": o.csrf }), 403, "forbidden");
        await expectError(await send(c, { ...cookie, origin: "https://attacker.example" }), 403, "forbidden");
      }
      expect(await tableCounts(server.db)).toEqual(before);
    });
  });

  it("401 answers say how to authenticate", async () => {
    const res = await server.fetch("/v1/plans");
    expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
    await expectError(res, 401, "missing_credential");
  });
});
