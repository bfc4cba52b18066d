import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase, onPostgres } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { bearer, expectAccepted, expectError } from "../helpers/requests.js";
import { tableCounts } from "../helpers/snapshot.js";
import { watchingStatements } from "../helpers/statements.js";

/** Key rotation (with its grace period), revocation, and secrets at rest. Time moves by the test clock, not by sleeping. */
onEachDatabase("keys on $db.name", (db) => {
  let server: TestServer;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    const made = await db.create({ migrated: true });
    drop = made.drop;
    server = await startTestServer(made.target);
  });
  afterAll(async () => {
    await server?.close();
    await drop?.();
  });

  /** `GET /v1/plans` answering 200 means authentication passed. */
  const accepted = async (appKey: string) => expectAccepted(await server.fetch("/v1/plans", { headers: bearer(appKey) }));
  const refused = async (appKey: string, code: string) => expectError(await server.fetch("/v1/plans", { headers: bearer(appKey) }), 401, code);
  const pairing = (pk: string) =>
    server.fetch(`/c/${pk}/v1/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ hostname: "h", platform: "linux", arch: "x64", client: "t" }),
    });

  it("a rotated app key keeps working for its grace period, then stops; the new one works", async () => {
    const app = await server.services.keys.createApp("Rotate", "test");
    const rotated = await server.services.keys.rotate(app.appKey, 3600);
    expect(rotated.key).not.toBe(app.appKey);
    await accepted(app.appKey);
    await accepted(rotated.key);
    server.clock.advance(3599);
    await accepted(app.appKey);
    server.clock.advance(1);
    await refused(app.appKey, "revoked_credential");
    await accepted(rotated.key);
    const listed = await server.services.keys.listKeys(app.appId);
    expect(listed.filter((k) => k.kind === "app").map((k) => k.state).sort()).toEqual(["active", "expired"]);
    const current = listed.find((k) => k.kind === "app" && k.state === "active")!;
    expect(current.lastUsedAt).toBe(server.clock.now().toISOString());
  });

  it("50 checks at once of a key not read yet share one read of its row and one write of its last use; a minute on, 20 requests write it once more (the control)", async () => {
    const app = await server.services.keys.createApp("Burst", "test");
    let reads = 0;
    let lastUsedWrites = 0;
    const see = (text: string) => {
      if (/FROM app_keys WHERE id = \$1/.test(text)) reads++;
      if (/^UPDATE app_keys SET last_used_at/.test(text)) lastUsedWrites++;
    };
    await watchingStatements(server.db, see, async () => {
      // As the auth middleware checks each request's key, all at once (HTTP requests arrive too spread out to overlap reliably).
      const tenants = await Promise.all(Array.from({ length: 50 }, () => server.services.keys.verifyAppKey(app.appKey)));
      expect(new Set(tenants.map((t) => `${t.appId} ${t.environment}`))).toEqual(new Set([`${app.appId} test`]));
    });
    expect({ reads, lastUsedWrites }).toEqual({ reads: 1, lastUsedWrites: 1 });
    server.clock.advance(60);
    await watchingStatements(server.db, see, async () => {
      await Promise.all(Array.from({ length: 20 }, () => accepted(app.appKey)));
    });
    // The row is still cached (the test clock moved, not the wall clock), and last use is written once more.
    expect({ reads, lastUsedWrites }).toEqual({ reads: 1, lastUsedWrites: 2 });
    const listed = await server.services.keys.listKeys(app.appId);
    expect(listed.find((k) => k.kind === "app")!.lastUsedAt).toBe(server.clock.now().toISOString());
  });

  it("a revoked app key stops at once and cannot be revoked or rotated again", async () => {
    const app = await server.services.keys.createApp("Revoke", "live");
    await accepted(app.appKey);
    await server.services.keys.revoke(app.appKey);
    await refused(app.appKey, "revoked_credential");
    await expect(server.services.keys.revoke(app.appKey)).rejects.toThrow(/already revoked/);
    await expect(server.services.keys.rotate(app.appKey)).rejects.toThrow(/already revoked/);
  });

  it("connect keys rotate and revoke the same way on the pairing path", async () => {
    const app = await server.services.keys.createApp("Connect", "test");
    expect((await pairing(app.connectKey)).status).toBe(200);
    const rotated = await server.services.keys.rotate(app.connectKey, 60);
    expect((await pairing(app.connectKey)).status).toBe(200);
    server.clock.advance(61);
    await expectError(await pairing(app.connectKey), 401, "revoked_credential");
    expect((await pairing(rotated.key)).status).toBe(200);
    await server.services.keys.revoke(rotated.key);
    await expectError(await pairing(rotated.key), 401, "revoked_credential");
  });

  it("keys of one app are independent of another's", async () => {
    const a = await server.services.keys.createApp("A", "test");
    const b = await server.services.keys.createApp("B", "test");
    await server.services.keys.revoke(a.appKey);
    await refused(a.appKey, "revoked_credential");
    await accepted(b.appKey);
    // A key's id with another key's secret is not a key.
    const [aId] = a.appKey.split(".");
    const [, bSecret] = b.appKey.split(".");
    await refused(`${aId}.${bSecret}`, "invalid_credential");
  });

  it("no secret is stored in clear: not app key secrets, not session tokens", async () => {
    const app = await server.services.keys.createApp("Secrets", "test");
    const session = await server.services.sessions.mint({ appId: app.appId, environment: "test" }, "user-1");
    const secrets = [app.appKey.split(".")[1], session.token, session.token.slice(4)];
    const before = await tableCounts(server.db);
    const columns = await server.db.query<{ table_name: string; column_name: string }>(
      `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'jsonb', 'ARRAY')`,
    );
    let scanned = 0;
    for (const { table_name, column_name } of columns) {
      const rows = await server.db.query<{ v: string | null }>(`SELECT "${column_name}"::text AS v FROM "${table_name}"`);
      for (const { v } of rows) {
        scanned++;
        for (const s of secrets) expect(v ?? "", `${table_name}.${column_name}`).not.toContain(s);
      }
    }
    expect(scanned).toBeGreaterThan(10);
    const [stored] = await server.db.query<{ secret_hash: string }>(`SELECT secret_hash FROM app_keys WHERE app_id = $1`, [app.appId]);
    expect(stored.secret_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(await tableCounts(server.db)).toEqual(before);
  });

  it("log lines never carry a credential, even of refused requests", async () => {
    const app = await server.services.keys.createApp("Logs", "test");
    const session = await server.services.sessions.mint({ appId: app.appId, environment: "test" }, "user-2");
    await accepted(app.appKey);
    await refused(`${app.appKey.split(".")[0]}.${"B".repeat(43)}`, "invalid_credential");
    await server.fetch("/v1/machines", { headers: bearer(session.token) });
    await server.fetch(`/v1/device/lookup?code=SECRETCODE`, { headers: bearer(session.token) });
    const all = server.logs.join("");
    expect(all).toContain('"path":"/v1/plans"');
    for (const s of [app.appKey.split(".")[1], session.token, "B".repeat(43), "SECRETCODE"]) expect(all).not.toContain(s);
  });
});

/**
 * Verified app keys are cached for a few seconds on each instance: a change made
 * on another instance must still stop the key at once (it is announced).
 */
onPostgres("a key changed on one instance, on another sharing the Postgres", (postgres) => {
  let a: TestServer;
  let b: TestServer;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const made = await postgres.create();
    drop = made.drop;
    a = await startTestServer(made.target);
    b = await startTestServer(made.target);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await drop?.();
  });
  const status = async (s: TestServer, key: string) => (await s.fetch("/v1/plans", { headers: bearer(key) })).status;

  it("is refused on the first instance right after the second revokes or rotates it without grace", async () => {
    const app = await a.services.keys.createApp("Cached", "test");
    expect(await status(a, app.appKey)).toBe(200); // verified, and now cached on A
    await b.services.keys.revoke(app.appKey);
    await expect.poll(() => status(a, app.appKey), { timeout: 1000, interval: 20 }).toBe(401);
    const other = await a.services.keys.createKeys(app.appId, "test");
    expect(await status(a, other.appKey)).toBe(200);
    await b.services.keys.rotate(other.appKey, 0);
    await expect.poll(() => status(a, other.appKey), { timeout: 1000, interval: 20 }).toBe(401);
  });
});
