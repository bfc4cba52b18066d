import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { signInOwner, type SignedInOwner } from "../helpers/owner.js";
import { bearer, expectAccepted, expectError } from "../helpers/requests.js";

/**
 * The dashboard's apps, keys and members through real HTTP: who sees which app
 * (another owner's app answers like one that does not exist), what a `member`
 * may not do (403), and keys made, rotated and revoked from the dashboard
 * working (and stopping) on the app's own routes.
 */
onEachDatabase("owner apps, keys and members on $db.name", (db) => {
  let server: TestServer;
  let owner: SignedInOwner;
  let member: SignedInOwner;
  let stranger: SignedInOwner;
  const dev = () => server.dev.appId;

  beforeAll(async () => {
    server = await startTestServerOn(db);
    owner = await signInOwner(server);
    member = await signInOwner(server, { role: "member" });
    stranger = await signInOwner(server, { appId: null });
  });
  afterAll(async () => {
    await server?.close();
  });

  const json = async (res: Response, status = 200) => {
    const text = await res.text();
    expect(res.status, text).toBe(status);
    return JSON.parse(text);
  };
  const plans = (key: string) => server.fetch("/v1/plans", { headers: bearer(key) });

  it("an owner lists the apps they are a member of, with their role", async () => {
    expect((await json(await owner.fetch("/v1/owner/apps"))).data).toEqual([expect.objectContaining({ id: dev(), role: "owner", name: "Local development app" })]);
    expect((await json(await member.fetch("/v1/owner/apps"))).data).toEqual([expect.objectContaining({ id: dev(), role: "member" })]);
    expect((await json(await stranger.fetch("/v1/owner/apps"))).data).toEqual([]);
  });

  it("creating an app makes its creator its owner and returns its test keys once; they work", async () => {
    const created = await json(await stranger.fetch("/v1/owner/apps", { method: "POST", body: { name: "Stranger's app" } }), 201);
    expect(created.app).toMatchObject({ name: "Stranger's app", role: "owner" });
    const [appKey, connectKey] = created.keys;
    expect(appKey).toMatchObject({ kind: "app", environment: "test", secret: expect.stringMatching(/^sk_svc_/), revokedAt: null, expiresAt: null });
    expect(connectKey).toMatchObject({ kind: "connect", environment: "test", secret: expect.stringMatching(/^pk_svc_/) });
    await expectAccepted(await plans(appKey.secret));
    expect((await json(await stranger.fetch("/v1/owner/apps"))).data.map((a: { id: string }) => a.id)).toEqual([created.app.id]);
    const listed = await json(await stranger.fetch(`/v1/owner/apps/${created.app.id}/keys`));
    expect(JSON.stringify(listed)).not.toContain(appKey.secret.split(".")[1]);
  });

  it("another owner's app answers exactly like an app that does not exist, on every per-app route", async () => {
    const theirs = (await json(await stranger.fetch("/v1/owner/apps"))).data[0].id as string;
    const routes: [string, string, unknown?][] = [
      ["GET", "/keys"],
      ["POST", "/keys", { environment: "test", kind: "app" }],
      ["GET", "/members"],
      ["POST", "/invites", { role: "member" }],
      ["DELETE", `/members/${stranger.ownerId}`],
      ["POST", "/keys/abcdefghijklmnop/rotate", { graceSeconds: 0 }],
      ["DELETE", "/keys/abcdefghijklmnop"],
    ];
    const before = await json(await stranger.fetch(`/v1/owner/apps/${theirs}/keys`));
    for (const [method, tail, body] of routes) {
      const foreign = await expectError(await owner.fetch(`/v1/owner/apps/${theirs}${tail}`, { method, body }), 404, "not_found");
      const none = await expectError(await owner.fetch(`/v1/owner/apps/app_nosuchappatall${tail}`, { method, body }), 404, "not_found");
      expect(foreign.error.message.replace(theirs, "<app>")).toBe(none.error.message.replace("app_nosuchappatall", "<app>"));
    }
    expect(await json(await stranger.fetch(`/v1/owner/apps/${theirs}/keys`))).toEqual(before);
  });

  it("keys: listed for both environments without secrets; created, rotated with a grace period, revoked; each change shows on the app's routes", async () => {
    const listed = (await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`))).data;
    expect(listed.map((k: { kind: string }) => k.kind).sort()).toEqual(["app", "connect"]);
    const text = JSON.stringify(listed);
    expect(text).not.toContain(server.dev.appKey.split(".")[1]);
    expect(text).not.toMatch(/secret|hash/i);
    // The dev key was used by now? Use it, then it shows.
    await expectAccepted(await plans(server.dev.appKey));
    const used = (await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`))).data.find((k: { kind: string }) => k.kind === "app");
    expect(used.lastUsedAt).toBe(server.clock.now().toISOString());

    const live = await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`, { method: "POST", body: { environment: "live" } }), 201);
    expect(live).toMatchObject({ kind: "app", environment: "live", secret: expect.stringMatching(/^sk_svc_/) });
    await expectAccepted(await plans(live.secret));
    const connect = await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`, { method: "POST", body: { environment: "live", kind: "connect" } }), 201);
    expect(connect).toMatchObject({ kind: "connect", environment: "live", secret: connect.id, lastUsedAt: null });
    const both = (await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`))).data;
    expect(new Set(both.map((k: { environment: string }) => k.environment))).toEqual(new Set(["test", "live"]));

    const rotated = await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys/${live.id}/rotate`, { method: "POST", body: { graceSeconds: 3600 } }));
    expect(rotated.previous).toMatchObject({ id: live.id, expiresAt: new Date(server.clock.now().getTime() + 3600_000).toISOString() });
    expect(rotated.key).toMatchObject({ kind: "app", environment: "live", secret: expect.stringMatching(/^sk_svc_/) });
    await expectAccepted(await plans(live.secret)); // the grace period
    await expectAccepted(await plans(rotated.key.secret));
    server.clock.advance(3600);
    await expectError(await plans(live.secret), 401, "revoked_credential");

    const revoked = await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys/${rotated.key.id}`, { method: "DELETE" }));
    expect(revoked).toMatchObject({ id: rotated.key.id, revokedAt: server.clock.now().toISOString() });
    await expectError(await plans(rotated.key.secret), 401, "revoked_credential");
    await expectError(await owner.fetch(`/v1/owner/apps/${dev()}/keys/${rotated.key.id}`, { method: "DELETE" }), 400, "invalid_request");
  });

  it("another app's key id through one's own app is not found, and stays untouched", async () => {
    const theirs = (await json(await stranger.fetch("/v1/owner/apps"))).data[0].id as string;
    const theirKeys = (await json(await stranger.fetch(`/v1/owner/apps/${theirs}/keys`))).data as { id: string }[];
    for (const k of theirKeys) {
      await expectError(await owner.fetch(`/v1/owner/apps/${dev()}/keys/${k.id}/rotate`, { method: "POST", body: { graceSeconds: 0 } }), 404, "not_found");
      await expectError(await owner.fetch(`/v1/owner/apps/${dev()}/keys/${k.id}`, { method: "DELETE" }), 404, "not_found");
    }
    expect((await json(await stranger.fetch(`/v1/owner/apps/${theirs}/keys`))).data).toEqual(theirKeys);
  });

  it("a member reads keys and members but may not change keys, invite or remove (403)", async () => {
    await json(await member.fetch(`/v1/owner/apps/${dev()}/keys`));
    await json(await member.fetch(`/v1/owner/apps/${dev()}/members`));
    const key = (await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`))).data.find((k: { kind: string; revokedAt: string | null }) => k.kind === "app" && !k.revokedAt);
    await expectError(await member.fetch(`/v1/owner/apps/${dev()}/keys`, { method: "POST", body: { environment: "test" } }), 403, "forbidden");
    await expectError(await member.fetch(`/v1/owner/apps/${dev()}/keys/${key.id}/rotate`, { method: "POST", body: {} }), 403, "forbidden");
    await expectError(await member.fetch(`/v1/owner/apps/${dev()}/keys/${key.id}`, { method: "DELETE" }), 403, "forbidden");
    await expectError(await member.fetch(`/v1/owner/apps/${dev()}/invites`, { method: "POST", body: { role: "owner" } }), 403, "forbidden");
    await expectError(await member.fetch(`/v1/owner/apps/${dev()}/members/${owner.ownerId}`, { method: "DELETE" }), 403, "forbidden");
    expect((await json(await owner.fetch(`/v1/owner/apps/${dev()}/keys`))).data.find((k: { id: string }) => k.id === key.id).revokedAt).toBeNull();
  });

  it("members: listed with open invitations; an owner removes a member; the last owner stays (409 last_owner)", async () => {
    const list = await json(await owner.fetch(`/v1/owner/apps/${dev()}/members`));
    expect(list.data.map((m: { owner: { id: string }; role: string }) => `${m.owner.id}:${m.role}`)).toEqual(expect.arrayContaining([`${owner.ownerId}:owner`, `${member.ownerId}:member`]));
    const after = await json(await owner.fetch(`/v1/owner/apps/${dev()}/members/${member.ownerId}`, { method: "DELETE" }));
    expect(after.data.map((m: { owner: { id: string } }) => m.owner.id)).not.toContain(member.ownerId);
    await expectError(await member.fetch(`/v1/owner/apps/${dev()}/keys`), 404, "not_found");
    await expectError(await owner.fetch(`/v1/owner/apps/${dev()}/members/${member.ownerId}`, { method: "DELETE" }), 404, "not_found");
    // The stranger's app has one owner: removing them is refused.
    const theirs = (await json(await stranger.fetch("/v1/owner/apps"))).data[0].id as string;
    await expectError(await stranger.fetch(`/v1/owner/apps/${theirs}/members/${stranger.ownerId}`, { method: "DELETE" }), 409, "last_owner");
    // The dev app has two owners (this one and the local owner): one may go.
    const devOwners = list.data.filter((m: { role: string }) => m.role === "owner");
    expect(devOwners.length).toBeGreaterThan(1);
    await json(await owner.fetch(`/v1/owner/apps/${dev()}/members/${owner.ownerId}`, { method: "DELETE" }));
    await expectError(await owner.fetch(`/v1/owner/apps/${dev()}/members`), 404, "not_found");
  });

  it("an owner route with an app key, a session or nothing is refused; the owner cookie is no credential on app routes", async () => {
    await expectError(await server.fetch("/v1/owner/apps", { headers: bearer(server.dev.appKey) }), 401, "wrong_credential_kind");
    await expectError(await server.fetch("/v1/plans", { headers: { cookie: stranger.cookie } }), 401, "missing_credential");
  });
});
