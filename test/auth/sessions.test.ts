import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";

/** The worker version the service speaks: worker/package.json's. */
const WORKER_VERSION = (JSON.parse(fs.readFileSync(new URL("../../worker/package.json", import.meta.url), "utf8")) as { version: string }).version;

/** End-user sessions as the app's server mints and ends them (spec endpoints 9 and 10). */
onEachDatabase("end-user sessions on $db.name", (db) => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServerOn(db);
  });
  afterAll(async () => {
    await server?.close();
  });

  const mint = (body: unknown, appKey = server.dev.appKey) =>
    server.fetch("/v1/end_users/session", { method: "POST", headers: { "content-type": "application/json", ...bearer(appKey) }, body: JSON.stringify(body) });
  const connect = (est: string) => server.fetch("/v1/connect", { headers: bearer(est) });

  describe("", () => {
    it("mints {session, expires_in, url}: ten minutes, the token only in the URL fragment, the user known from then on", async () => {
      const res = await mint({ user: "alice", email: "alice@example.com" });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { session: string; expires_in: number; url: string; billing_url: string };
      expect(body.session).toMatch(/^est_[A-Za-z0-9_-]{43}$/);
      expect(body.expires_in).toBe(600);
      const url = new URL(body.url);
      expect(`${url.origin}${url.pathname}`).toBe(`${server.url}/connect`);
      expect(url.search).toBe("");
      expect(url.hash).toBe(`#session=${body.session}`);
      expect(body.billing_url).toBe(`${server.url}/billing#session=${body.session}`);

      const user = await server.db.prisma.endUser.findFirstOrThrow({ where: { externalId: "alice" }, include: { sessions: true } });
      expect(user.email).toBe("alice@example.com");
      const stored = user.sessions.at(-1)!;
      expect(stored.expiresAt.getTime() - server.clock.now().getTime()).toBe(600_000);
      expect(JSON.stringify(stored)).not.toContain(body.session.slice(4));

      const info = await connect(body.session);
      expect(await info.json()).toEqual({
        app: { id: server.dev.appId, name: "Local development app" },
        environment: "test",
        user: "alice",
        connectKey: server.dev.connectKey,
        serverUrl: server.url,
        // The worker from this service itself, by URL: no registry name anyone could claim.
        pairingCommand: `npx --yes ${server.url}/worker/svc-worker-${WORKER_VERSION}.tgz pair --connect-key ${server.dev.connectKey} --server ${server.url}`,
        worker: { version: WORKER_VERSION, packageUrl: `${server.url}/worker/svc-worker-${WORKER_VERSION}.tgz`, scriptUrl: `${server.url}/worker/svc-worker-${WORKER_VERSION}.mjs` },
      });
    });

    it("the connect page names the newest working connect key after a rotation", async () => {
      const app = await server.services.keys.createApp("Rotating", "test");
      const rotated = await server.services.keys.rotate(app.connectKey);
      const { session } = (await (await mint({ user: "carol" }, app.appKey)).json()) as { session: string };
      expect(((await (await connect(session)).json()) as { connectKey: string }).connectKey).toBe(rotated.key);
    });

    it("DELETE ?user= ends every live session of that user, and only theirs", async () => {
      const tokens = [];
      for (let i = 0; i < 3; i++) tokens.push(((await (await mint({ user: "dave" })).json()) as { session: string }).session);
      const other = ((await (await mint({ user: "erin" })).json()) as { session: string }).session;
      const res = await server.fetch("/v1/end_users/session?user=dave", { method: "DELETE", headers: bearer(server.dev.appKey) });
      expect(await res.json()).toEqual({ user: "dave", ended: 3 });
      for (const t of tokens) await expectError(await connect(t), 401, "session_expired");
      expect((await connect(other)).status).toBe(200);
      // Ending again ends nothing more; an unknown user has nothing to end.
      const again = await server.fetch("/v1/end_users/session?user=dave", { method: "DELETE", headers: bearer(server.dev.appKey) });
      expect(await again.json()).toEqual({ user: "dave", ended: 0 });
      const nobody = await server.fetch("/v1/end_users/session?user=nobody", { method: "DELETE", headers: bearer(server.dev.appKey) });
      expect(await nobody.json()).toEqual({ user: "nobody", ended: 0 });
      expect(await server.db.prisma.endUser.count({ where: { externalId: "nobody" } })).toBe(0);
    });

    it("bad input is a 400 naming the field, and mints nothing", async () => {
      const before = await server.db.prisma.endUserSession.count();
      expect((await expectError(await mint({}), 400, "invalid_request")).error.param).toBe("user");
      expect((await expectError(await mint({ user: "" }), 400, "invalid_request")).error.param).toBe("user");
      expect((await expectError(await mint({ user: "x".repeat(257) }), 400, "invalid_request")).error.param).toBe("user");
      expect((await expectError(await mint({ user: "a", email: "not-an-email" }), 400, "invalid_request")).error.param).toBe("email");
      await expectError(await server.fetch("/v1/end_users/session", { method: "DELETE", headers: bearer(server.dev.appKey) }), 400, "invalid_request");
      expect(await server.db.prisma.endUserSession.count()).toBe(before);
    });
  });
});
