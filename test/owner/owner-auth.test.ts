import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { cookieOf, ownerClient, signInOwner, type SignedInOwner } from "../helpers/owner.js";
import { expectError } from "../helpers/requests.js";
import { OWNER_SESSION_ABSOLUTE_SECONDS, OWNER_SESSION_IDLE_SECONDS } from "../../server/owners/sessions.js";
import { SIGN_IN_LINK_SECONDS } from "../../server/owners/links.js";
import { INVITE_SECONDS } from "../../server/owners/invites.js";

const PASSWORD = "correct horse battery staple";

/**
 * The dashboard's account side through real HTTP: signing in (password, one-time
 * link, invitation), the session cookie and its lifetimes, CSRF, signing out.
 */
onEachDatabase("owner accounts on $db.name", (db) => {
  let server: TestServer;
  let addresses = 0;
  /** Each test its own client address: the per-address sign-in limit never decides another test's answer. */
  const address = () => ({ "x-forwarded-for": `10.9.${(++addresses >> 8) & 255}.${addresses & 255}` });
  const email = () => `owner-${randomBytes(5).toString("hex")}@example.com`;

  beforeAll(async () => {
    server = await startTestServerOn(db, { TRUST_PROXY: "true" });
  });
  afterAll(async () => {
    await server?.close();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    server.fetch(path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  /** An account with a password, member (owner) of the dev app. */
  async function account(e = email(), password = PASSWORD) {
    const o = await server.services.owners.accounts.create({ email: e, name: "Pat", password });
    await server.services.owners.members.add(server.dev.appId, o.id, "owner");
    return o;
  }

  it("password sign-in sets the session cookie (HttpOnly, SameSite=Strict, Path=/, Max-Age of the absolute lifetime) and answers the owner and the CSRF token", async () => {
    const e = email();
    await account(e);
    const res = await post("/v1/owner/sign_in", { email: e.toUpperCase(), password: PASSWORD }, address());
    const setCookie = res.headers.get("set-cookie")!;
    const o = await ownerClient(server, res);
    expect(setCookie).toMatch(/^svc_owner=ost_[A-Za-z0-9_-]{43};/);
    const attrs = setCookie.split(/;\s*/).slice(1);
    expect(attrs).toEqual(expect.arrayContaining(["HttpOnly", "SameSite=Strict", "Path=/", `Max-Age=${OWNER_SESSION_ABSOLUTE_SECONDS}`]));
    expect(attrs).not.toContain("Secure"); // served over http here; https gets Secure
    expect(res.headers.get("cache-control")).toBe("no-store");
    const me = await (await o.fetch("/v1/owner/me")).json();
    expect(me.owner).toMatchObject({ email: e, name: "Pat", hasPassword: true });
    expect(me.csrfToken).toBe(o.csrf);
    expect(me.apps).toEqual([expect.objectContaining({ id: server.dev.appId, role: "owner" })]);
    expect(Date.parse(me.sessionExpiresAt) - server.clock.now().getTime()).toBe(OWNER_SESSION_ABSOLUTE_SECONDS * 1000);
  });

  it("a wrong password and an unknown email are the same 401; an account without a password cannot sign in by password", async () => {
    const e = email();
    await account(e);
    const h = address();
    const wrong = await expectError(await post("/v1/owner/sign_in", { email: e, password: "wrong password" }, h), 401, "invalid_credential");
    const unknown = await expectError(await post("/v1/owner/sign_in", { email: email(), password: "wrong password" }, h), 401, "invalid_credential");
    expect(unknown.error.message).toBe(wrong.error.message);
    const linkOnly = await server.services.owners.accounts.create({ email: email() });
    const none = await expectError(await post("/v1/owner/sign_in", { email: linkOnly.email, password: "anything at all" }, h), 401, "invalid_credential");
    expect(none.error.message).toBe(wrong.error.message);
  });

  it("failed sign-ins are limited per email (10 per 15 minutes), then even the right password waits", async () => {
    const e = email();
    await account(e);
    for (let i = 0; i < 10; i++) await expectError(await post("/v1/owner/sign_in", { email: e, password: `wrong ${i}` }, address()), 401, "invalid_credential");
    const limited = await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address());
    expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
    await expectError(limited, 429, "rate_limited");
    server.clock.advance(15 * 60 + 1);
    await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address()));
  });

  it("failed sign-ins are limited per client address (30 per 15 minutes), whatever the emails", async () => {
    const h = address();
    for (let i = 0; i < 30; i++) await expectError(await post("/v1/owner/sign_in", { email: email(), password: "wrong" }, h), 401, "invalid_credential");
    await expectError(await post("/v1/owner/sign_in", { email: email(), password: "wrong" }, h), 429, "rate_limited");
    const e = email();
    await account(e);
    await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address())); // another address is not limited
    server.clock.advance(15 * 60 + 1);
  });

  it("the cookie is the only credential: an Authorization header is the wrong kind, none is missing, an unknown one invalid", async () => {
    const o = await signInOwner(server);
    await expectError(await server.fetch("/v1/owner/me"), 401, "missing_credential");
    await expectError(await server.fetch("/v1/owner/me", { headers: { cookie: "other=1" } }), 401, "missing_credential");
    await expectError(await server.fetch("/v1/owner/me", { headers: { cookie: o.cookie, authorization: `Bearer ${server.dev.appKey}` } }), 401, "wrong_credential_kind");
    await expectError(await server.fetch("/v1/owner/me", { headers: { cookie: `svc_owner=ost_${"A".repeat(43)}` } }), 401, "invalid_credential");
    await expectError(await server.fetch("/v1/owner/me", { headers: { cookie: "svc_owner=garbage" } }), 401, "invalid_credential");
    expect((await o.fetch("/v1/owner/me")).status).toBe(200);
  });

  it("an owner route called with an app key, or with nothing, says how to sign in: the dashboard's address, the first start's one-time link, the command making a new one", async () => {
    const signIn = (message: string) => {
      expect(message).toContain(`${server.url}/dashboard`);
      expect(message).toContain("the one-time sign-in link the first `npm start` printed");
      expect(message).toContain("`npx svc dashboard`");
      // Not the cookie's name alone: an app developer with a key has never seen one.
      expect(message).toMatch(/sign in/i);
    };
    const withKey = await expectError(await server.fetch(`/v1/owner/apps/${server.dev.appId}/env/test/overview`, { headers: { authorization: `Bearer ${server.dev.appKey}` } }), 401, "wrong_credential_kind");
    signIn(withKey.error.message);
    expect(withKey.error.message).toContain("It was sent an app key (sk_svc_...): app keys are for the API");
    // The key itself is never repeated back.
    expect(withKey.error.message).not.toContain(server.dev.appKey.split(".")[1]);
    const bare = await expectError(await server.fetch(`/v1/owner/apps/${server.dev.appId}/env/test/overview`), 401, "missing_credential");
    signIn(bare.error.message);
    // A change with nothing: the same words (no CSRF talk before there is a session).
    const change = await expectError(await post("/v1/owner/apps", { name: "Nope" }), 401, "missing_credential");
    signIn(change.error.message);
  });

  it("a request that changes something needs X-CSRF-Token equal to the session's, and no cross-site Origin", async () => {
    const o = await signInOwner(server);
    const noToken = await expectError(await server.fetch("/v1/owner/sign_out", { method: "POST", headers: { cookie: o.cookie } }), 403, "forbidden");
    expect(noToken.error.message).toMatch(/X-CSRF-Token/);
    const other = await signInOwner(server);
    const wrong = await expectError(await server.fetch("/v1/owner/sign_out", { method: "POST", headers: { cookie: o.cookie, "x-csrf-token": other.csrf } }), 403, "forbidden");
    expect(wrong.error.message).toMatch(/X-CSRF-Token/);
    await expectError(await o.fetch("/v1/owner/sign_out", { method: "POST", headers: { origin: "https://evil.example" } }), 403, "forbidden");
    await expectError(await o.fetch("/v1/owner/sign_out", { method: "POST", headers: { "sec-fetch-site": "cross-site" } }), 403, "forbidden");
    await expectError(await o.fetch("/v1/owner/apps", { method: "POST", body: { name: "CSRF" }, headers: { "x-csrf-token": "" } }), 403, "forbidden");
    // None of those changed anything: the session is live, no app was made.
    expect((await (await o.fetch("/v1/owner/apps")).json()).data).toHaveLength(1);
    // The service's own origin, with the token: accepted.
    const res = await o.fetch("/v1/owner/sign_out", { method: "POST", headers: { origin: new URL(server.url).origin } });
    expect(await res.json()).toEqual({ signedOut: 1 });
  });

  it("sign-out ends this session and clears the cookie; the other sessions stay", async () => {
    const e = email();
    await account(e);
    const a = await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address()));
    const b = await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address()));
    const res = await a.fetch("/v1/owner/sign_out", { method: "POST" });
    expect(res.status).toBe(200);
    expect(res.headers.get("set-cookie")).toMatch(/^svc_owner=;.*Max-Age=0/);
    expect(await res.json()).toEqual({ signedOut: 1 });
    await expectError(await a.fetch("/v1/owner/me"), 401, "session_expired");
    expect((await b.fetch("/v1/owner/me")).status).toBe(200);
  });

  it("sign-out-everywhere ends every session of the owner, this one included", async () => {
    const e = email();
    await account(e);
    const sessions = [];
    for (let i = 0; i < 3; i++) sessions.push(await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address())));
    const bystander = await signInOwner(server);
    const res = await sessions[0].fetch("/v1/owner/sign_out_everywhere", { method: "POST" });
    expect(await res.json()).toEqual({ signedOut: 3 });
    expect(res.headers.get("set-cookie")).toMatch(/Max-Age=0/);
    for (const s of sessions) await expectError(await s.fetch("/v1/owner/me"), 401, "session_expired");
    expect((await bystander.fetch("/v1/owner/me")).status).toBe(200);
  });

  it("changing the password needs the current one and ends the other sessions", async () => {
    const e = email();
    await account(e);
    const a = await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address()));
    const b = await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address()));
    await expectError(await a.fetch("/v1/owner/password", { method: "PUT", body: { newPassword: "another long password" } }), 403, "forbidden");
    await expectError(await a.fetch("/v1/owner/password", { method: "PUT", body: { currentPassword: "wrong", newPassword: "another long password" } }), 403, "forbidden");
    await expectError(await a.fetch("/v1/owner/password", { method: "PUT", body: { currentPassword: PASSWORD, newPassword: "short" } }), 400, "invalid_request");
    const res = await a.fetch("/v1/owner/password", { method: "PUT", body: { currentPassword: PASSWORD, newPassword: "another long password" } });
    expect(await res.json()).toMatchObject({ email: e, hasPassword: true });
    expect((await a.fetch("/v1/owner/me")).status).toBe(200);
    await expectError(await b.fetch("/v1/owner/me"), 401, "session_expired");
    await expectError(await post("/v1/owner/sign_in", { email: e, password: PASSWORD }, address()), 401, "invalid_credential");
    await ownerClient(server, await post("/v1/owner/sign_in", { email: e, password: "another long password" }, address()));
  });

  it("an account made by a link sets its first password without a current one", async () => {
    const o = await signInOwner(server);
    expect((await (await o.fetch("/v1/owner/me")).json()).owner.hasPassword).toBe(false);
    const res = await o.fetch("/v1/owner/password", { method: "PUT", body: { newPassword: PASSWORD } });
    expect(await res.json()).toMatchObject({ hasPassword: true });
    await ownerClient(server, await post("/v1/owner/sign_in", { email: o.email, password: PASSWORD }, address()));
  });

  it("a session ends after 24 hours without a request, and 7 days after it began whatever happens", async () => {
    const idle = await signInOwner(server);
    const busy = await signInOwner(server);
    server.clock.advance(OWNER_SESSION_IDLE_SECONDS - 60);
    expect((await idle.fetch("/v1/owner/me")).status).toBe(200); // seen again: the idle period starts over
    expect((await busy.fetch("/v1/owner/me")).status).toBe(200);
    server.clock.advance(OWNER_SESSION_IDLE_SECONDS - 60);
    expect((await busy.fetch("/v1/owner/me")).status).toBe(200);
    server.clock.advance(120);
    await expectError(await idle.fetch("/v1/owner/me"), 401, "session_expired");
    // The busy one, seen every 23 hours, still ends at its absolute expiry.
    const started = server.clock.now().getTime() - (2 * OWNER_SESSION_IDLE_SECONDS) * 1000;
    while (server.clock.now().getTime() < started + OWNER_SESSION_ABSOLUTE_SECONDS * 1000 - 23 * 3600 * 1000) {
      server.clock.advance(23 * 3600);
      expect((await busy.fetch("/v1/owner/me")).status).toBe(200);
    }
    server.clock.advance(23 * 3600);
    await expectError(await busy.fetch("/v1/owner/me"), 401, "session_expired");
  });

  it("a sign-in link is single use and lives 15 minutes", async () => {
    const { owners } = server.services;
    const o = await owners.accounts.create({ email: email() });
    const once = await owners.links.create(o.id);
    await ownerClient(server, await post("/v1/owner/sign_in/link", { token: once.token }));
    const again = await expectError(await post("/v1/owner/sign_in/link", { token: once.token }), 401, "invalid_credential");
    const late = await owners.links.create(o.id);
    server.clock.advance(SIGN_IN_LINK_SECONDS);
    const expired = await expectError(await post("/v1/owner/sign_in/link", { token: late.token }), 401, "invalid_credential");
    const unknown = await expectError(await post("/v1/owner/sign_in/link", { token: `olt_${"B".repeat(43)}` }), 401, "invalid_credential");
    expect(new Set([again.error.message, expired.error.message, unknown.error.message]).size).toBe(1);
    // Two redeems at once: one wins.
    const raced = await owners.links.create(o.id);
    const answers = await Promise.all([0, 1].map(() => post("/v1/owner/sign_in/link", { token: raced.token })));
    expect(answers.map((r) => r.status).sort()).toEqual([200, 401]);
  });

  it("the first start prints a sign-in link for a local owner of the dev app, in the fragment", async () => {
    const banner = server.printed.join("");
    const link = /dashboard\s+(\S+)/.exec(banner)![1];
    expect(link).toMatch(new RegExp(`^${server.url}/dashboard/sign-in#token=olt_[A-Za-z0-9_-]{43}$`));
    // The banner was printed at start: move the clock back is not possible, so its link may have expired here; a fresh one from the same operation works.
    const fresh = await server.services.owners.operatorSignInLink();
    expect(fresh).toMatchObject({ email: "owner@svc.localhost", created: false });
    const o = await ownerClient(server, await post("/v1/owner/sign_in/link", { token: fresh.token }));
    const me = await (await o.fetch("/v1/owner/me")).json();
    expect(me.owner.email).toBe("owner@svc.localhost");
    expect(me.apps).toEqual([expect.objectContaining({ id: server.dev.appId, role: "owner" })]);
  });

  describe("invitations", () => {
    let owner: SignedInOwner;
    beforeAll(async () => {
      owner = await signInOwner(server);
    });
    const invite = async (body: Record<string, unknown>) => {
      const res = await owner.fetch(`/v1/owner/apps/${server.dev.appId}/invites`, { method: "POST", body });
      const text = await res.text();
      expect(res.status, text).toBe(201);
      const inv = JSON.parse(text);
      expect(inv.url).toMatch(new RegExp(`^${server.url}/dashboard/invite#token=oin_[A-Za-z0-9_-]{43}$`));
      return { ...inv, token: inv.url.split("#token=")[1] as string };
    };

    it("a new email makes its account (a password is required), joins with the invited role and is signed in; the link is single use", async () => {
      const inv = await invite({ role: "member" });
      expect(Date.parse(inv.expiresAt) - server.clock.now().getTime()).toBe(INVITE_SECONDS * 1000);
      const e = email();
      const listed = await (await owner.fetch(`/v1/owner/apps/${server.dev.appId}/members`)).json();
      expect(listed.invites.map((i: { id: string }) => i.id)).toContain(inv.id);
      await expectError(await post("/v1/owner/invites/accept", { token: inv.token, email: e }), 400, "invalid_request");
      const res = await post("/v1/owner/invites/accept", { token: inv.token, email: e, name: "New", password: PASSWORD }, address());
      expect(res.headers.get("set-cookie")).toMatch(/^svc_owner=ost_/);
      const joined = await ownerClient(server, res);
      const me = await (await joined.fetch("/v1/owner/me")).json();
      expect(me.owner).toMatchObject({ email: e, name: "New", hasPassword: true });
      expect(me.apps).toEqual([expect.objectContaining({ id: server.dev.appId, role: "member" })]);
      await expectError(await post("/v1/owner/invites/accept", { token: inv.token, email: email(), password: PASSWORD }), 401, "invalid_credential");
      const after = await (await owner.fetch(`/v1/owner/apps/${server.dev.appId}/members`)).json();
      expect(after.invites.map((i: { id: string }) => i.id)).not.toContain(inv.id);
      expect(after.data).toContainEqual(expect.objectContaining({ owner: expect.objectContaining({ email: e }), role: "member" }));
    });

    it("an existing account proves itself with its own password; a wrong one does not spend the invitation", async () => {
      const other = await server.services.owners.accounts.create({ email: email(), password: PASSWORD });
      const app = await server.services.keys.createApp("Elsewhere", "test");
      await server.services.owners.members.add(app.appId, other.id, "owner");
      const inv = await invite({ role: "owner" });
      await expectError(await post("/v1/owner/invites/accept", { token: inv.token, email: other.email, password: "wrong password!" }, address()), 401, "invalid_credential");
      await expectError(await post("/v1/owner/invites/accept", { token: inv.token, email: other.email }, address()), 401, "invalid_credential");
      const joined = await ownerClient(server, await post("/v1/owner/invites/accept", { token: inv.token, email: other.email, password: PASSWORD }, address()));
      const apps = (await (await joined.fetch("/v1/owner/me")).json()).apps.map((a: { id: string; role: string }) => `${a.id}:${a.role}`).sort();
      expect(apps).toEqual([`${app.appId}:owner`, `${server.dev.appId}:owner`].sort());
    });

    it("an invitation bound to an email takes only that email; an expired one nobody", async () => {
      const bound = email();
      const inv = await invite({ role: "member", email: bound.toUpperCase() });
      expect(inv.email).toBe(bound);
      await expectError(await post("/v1/owner/invites/accept", { token: inv.token, email: email(), password: PASSWORD }), 401, "invalid_credential");
      await ownerClient(server, await post("/v1/owner/invites/accept", { token: inv.token, email: bound, password: PASSWORD }, address()));
      const late = await invite({ role: "member" });
      server.clock.advance(INVITE_SECONDS);
      await expectError(await post("/v1/owner/invites/accept", { token: late.token, email: email(), password: PASSWORD }), 401, "invalid_credential");
      owner = await signInOwner(server); // the clock moved past the session's lifetime
    });
  });

  it("without a live invitation nothing is said about an email: no password needed to learn it has no account", async () => {
    const fake = `oin_${"C".repeat(43)}`;
    await expectError(await post("/v1/owner/invites/accept", { token: fake, email: email() }), 401, "invalid_credential");
    const existing = await account();
    await expectError(await post("/v1/owner/invites/accept", { token: fake, email: existing.email }), 401, "invalid_credential");
  });

  it("no email, password, session token, link or CSRF token reaches the log", async () => {
    const logs = server.logs.join("");
    expect(logs.length).toBeGreaterThan(0);
    expect(logs).not.toMatch(/@example\.com|@svc\.localhost/);
    expect(logs).not.toMatch(/ost_[A-Za-z0-9_-]{10}|olt_[A-Za-z0-9_-]{10}|oin_[A-Za-z0-9_-]{10}/);
    expect(logs).not.toContain(PASSWORD);
    expect(logs).not.toMatch(/\$argon2id/);
  });
});
