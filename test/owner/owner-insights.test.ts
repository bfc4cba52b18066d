import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer } from "../helpers/requests.js";
import { signInOwner, type SignedInOwner } from "../helpers/owner.js";

/**
 * The dashboard's landing page and logs, over real HTTP on both databases: keys with
 * names and makers, the request log (what the app's keys did; nothing of anyone
 * else's; its filters, pages and retention) and the overview's figures after real
 * requests.
 */
onEachDatabase("keys, the request log and the overview on $db.name", (db) => {
  let server: TestServer;
  let owner: SignedInOwner;
  const ENV = () => `/v1/owner/apps/${server.dev.appId}/env/test`;
  const json = async (res: Response | Promise<Response>, status = 200) => {
    const r = await res;
    const text = await r.text();
    expect(r.status, text).toBe(status);
    return JSON.parse(text);
  };
  const appFetch = (path: string, key: string, body?: unknown) =>
    server.fetch(path, body === undefined ? { headers: bearer(key) } : { method: "POST", headers: { ...bearer(key), "content-type": "application/json" }, body: JSON.stringify(body) });
  const requests = async (query = "") => json(owner.fetch(`${ENV()}/requests${query}`));

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    owner = await signInOwner(server, { email: "keys-owner@example.com" });
  });
  afterAll(async () => {
    await server?.close();
  });

  describe("keys with names and makers", () => {
    it("a key made in the dashboard carries its name and maker; renamed and cleared; a rotation keeps the name and names who rotated; CLI-made keys have no maker", async () => {
      const made = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys`, { method: "POST", body: { environment: "test", kind: "app", name: "  production server " } }), 201);
      expect(made).toMatchObject({ name: "production server", createdBy: { id: owner.ownerId, email: "keys-owner@example.com", name: "Test owner" } });
      expect(made.secret).toMatch(/^sk_svc_/);

      const renamed = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys/${made.id}`, { method: "PATCH", body: { name: "staging" } }));
      expect(renamed).toMatchObject({ id: made.id, name: "staging" });
      // An empty name is a typo, not a clear: 400, nothing changed.
      const empty = await owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys/${made.id}`, { method: "PATCH", body: { name: "  " } });
      expect(empty.status).toBe(400);

      const other = await signInOwner(server, { email: "rotator@example.com" });
      const rotated = await json(other.fetch(`/v1/owner/apps/${server.dev.appId}/keys/${made.id}/rotate`, { method: "POST", body: { graceSeconds: 0 } }));
      expect(rotated.key).toMatchObject({ name: "staging", createdBy: { email: "rotator@example.com" } });
      expect(rotated.previous).toMatchObject({ name: "staging", createdBy: { email: "keys-owner@example.com" } });

      const cleared = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys/${rotated.key.id}`, { method: "PATCH", body: { name: null } }));
      expect(cleared.name).toBeNull();

      const listed = (await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys`))).data as { id: string; name: string | null; createdBy: unknown }[];
      // The dev app's first keys were made by the first start, not a member.
      const devKeyId = server.dev.appKey.slice("sk_svc_".length).split(".")[0];
      expect(listed.find((k) => k.id === devKeyId)).toMatchObject({ name: null, createdBy: null });
      expect(listed.find((k) => k.id === made.id)).toMatchObject({ name: "staging" });
    });

    it("a member who is not an owner cannot rename a key (403), and the name is unchanged", async () => {
      const member = await signInOwner(server, { role: "member" });
      const made = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys`, { method: "POST", body: { environment: "test", kind: "connect", name: "web pages" } }), 201);
      expect((await member.fetch(`/v1/owner/apps/${server.dev.appId}/keys/${made.id}`, { method: "PATCH", body: { name: "mine" } })).status).toBe(403);
      const listed = (await json(member.fetch(`/v1/owner/apps/${server.dev.appId}/keys`))).data as { id: string; name: string }[];
      expect(listed.find((k) => k.id === made.id)?.name).toBe("web pages");
    });
  });

  describe("the request log", () => {
    it("records the app key's requests (method, path without query, route, status, error code, key), not sessions' nor the owner's", async () => {
      const key = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/keys`, { method: "POST", body: { environment: "test", kind: "app", name: "log key" } }), 201);
      // Positive: three requests with the key, one of them refused.
      await json(appFetch("/v1/chat/completions", key.secret, { model: "svc/echo", user: "log-user", messages: [{ role: "user", content: "hi" }] }));
      const missing = await appFetch("/v1/runs/run_doesnotexist?secret=s3cr3t", key.secret);
      expect(missing.status).toBe(404);
      const missingId = missing.headers.get("x-request-id");
      const session = await json(appFetch("/v1/end_users/session", key.secret, { user: "log-user" }));
      // Not recorded: an end-user session's request, a wrong key, the owner's own reads.
      await server.fetch("/v1/connect", { headers: bearer(session.session) });
      await appFetch("/v1/runs/run_x", `${key.secret.split(".")[0]}.wrongsecret`);
      await server.services.insights.requestLog.flush();

      const byKey = (await requests("?limit=200")).data.filter((r: { key: { id: string } }) => r.key.id === key.id);
      expect(byKey.map((r: { method: string; path: string }) => `${r.method} ${r.path}`)).toEqual(["POST /v1/end_users/session", "GET /v1/runs/run_doesnotexist", "POST /v1/chat/completions"]);
      const notFound = byKey[1];
      expect(notFound).toMatchObject({ route: "/v1/runs/:id", status: 404, errorCode: "not_found", requestId: missingId, key: { id: key.id, name: "log key" } });
      expect(JSON.stringify(byKey)).not.toContain("s3cr3t");
      expect(byKey[2]).toMatchObject({ status: 200, errorCode: null, route: "/v1/chat/completions", user: "log-user", runId: expect.stringMatching(/^run_/) });
      expect(notFound.runId).toBeNull();
      // The run a request started is the link to it, and its user finds it.
      const ofUser = (await requests("?user=log-user")).data as { path: string }[];
      expect(ofUser.map((r) => r.path)).toEqual(["/v1/end_users/session", "/v1/chat/completions"]);
      const run = await json(server.fetch(`/v1/runs/${byKey[2].runId}`, { headers: bearer(key.secret) }));
      expect(run.id).toBe(byKey[2].runId);
      await server.services.insights.requestLog.flush();
      // Reading the run by id: the row names the run, and its user through the run.
      const read = (await requests(`?path=/v1/runs/${byKey[2].runId}`)).data[0];
      expect(read).toMatchObject({ runId: byKey[2].runId, user: "log-user", status: 200 });
      expect(byKey.every((r: { durationMs: number }) => r.durationMs >= 0)).toBe(true);
      const all = (await requests("?limit=200")).data as { path: string; status: number }[];
      expect(all.some((r) => r.path === "/v1/connect")).toBe(false);
      expect(all.some((r) => r.path === "/v1/runs/run_x")).toBe(false);
      expect(all.some((r) => r.path.startsWith("/v1/owner"))).toBe(false);
    });

    it("filters by outcome, method, path and request id; pages by cursor; the other environment sees none", async () => {
      for (let i = 0; i < 5; i++) {
        await json(appFetch("/v1/end_users/session", server.dev.appKey, { user: `page-user-${i}` }));
        await json(appFetch(`/v1/users/page-user-${i}`, server.dev.appKey));
      }
      await appFetch("/v1/users/nobody-at-all", server.dev.appKey);
      await server.services.insights.requestLog.flush();
      const failed = (await requests("?outcome=failed")).data as { status: number }[];
      expect(failed.length).toBeGreaterThan(0);
      expect(failed.every((r) => r.status >= 400)).toBe(true);
      const ok = (await requests("?outcome=succeeded&method=GET&path=/v1/users/")).data as { status: number; method: string; path: string }[];
      expect(ok.length).toBe(5);
      expect(ok.every((r) => r.status < 400 && r.method === "GET" && r.path.startsWith("/v1/users/"))).toBe(true);
      const requestId = (ok[0] as unknown as { requestId: string }).requestId;
      expect((await requests(`?requestId=${requestId}`)).data).toHaveLength(1);
      // Another environment's request id, named under this one's path: nothing (the same id found just above is the control).
      expect((await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/env/live/requests?requestId=${requestId}`))).data).toEqual([]);

      const first = await requests("?path=/v1/users/&outcome=succeeded&limit=2");
      expect(first).toMatchObject({ hasMore: true, retentionDays: 14 });
      const second = await requests(`?path=/v1/users/&outcome=succeeded&limit=2&cursor=${first.nextCursor}`);
      const third = await requests(`?path=/v1/users/&outcome=succeeded&limit=2&cursor=${second.nextCursor}`);
      const paths = [...first.data, ...second.data, ...third.data].map((r: { path: string }) => r.path);
      expect(paths).toEqual([4, 3, 2, 1, 0].map((i) => `/v1/users/page-user-${i}`));
      expect(third.hasMore).toBe(false);
      expect((await owner.fetch(`${ENV()}/requests?cursor=nonsense`)).status).toBe(400);

      const live = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/env/live/requests`));
      expect(live.data).toEqual([]);
    });

    it("keeps rows for the retention: the sweep deletes older ones only", async () => {
      const log = server.services.insights.requestLog;
      const before = (await requests("?limit=200")).data.length;
      expect(before).toBeGreaterThan(0);
      // Aged by the server's clock, not the database's: the test clock is not today's date.
      const now = server.clock.now().getTime();
      await server.db.query(`UPDATE api_requests SET created_at = $1 WHERE path = '/v1/users/page-user-0'`, [new Date(now - 20 * 86_400_000)]);
      const deleted = await log.sweep(new Date(now - 14 * 86_400_000));
      expect(deleted).toBe(1);
      const after = (await requests("?limit=200")).data as { path: string }[];
      expect(after.length).toBe(before - 1);
      expect(after.some((r) => r.path === "/v1/users/page-user-1")).toBe(true);
    });
  });

  describe("the overview", () => {
    it("counts what happened: runs today and this month, failed, handed back, users, machines, requests and webhooks; the live environment apart", async () => {
      const o0 = await json(owner.fetch(`${ENV()}/overview`));
      const script = JSON.stringify([{ fail: "boom" }]);
      const run = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json", accept: "application/json" }, body: JSON.stringify({ model: "svc/echo", user: "overview-user", prompt: script }) });
      expect(run.status).toBeLessThan(300);
      await run.text();
      await server.services.insights.requestLog.flush();
      await expect
        .poll(async () => (await json(owner.fetch(`${ENV()}/overview`))).runs.failedToday, { timeout: 10_000 })
        .toBe(o0.runs.failedToday + 1);
      // A run handed back to the app (no machine to take it, the route allows `app`): counted beside the failures, not as one.
      const handback = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json", accept: "application/json" }, body: JSON.stringify({ model: "auto", user: "overview-user", prompt: "hi", route: { prefer: ["app"] } }) });
      expect(handback.status, await handback.clone().text()).toBe(409);
      expect(((await handback.json()) as { error: { code: string } }).error.code).toBe("serve_in_app");
      const o1 = await json(owner.fetch(`${ENV()}/overview`));
      expect(o1.runs.handedBackToday).toBe(o0.runs.handedBackToday + 1);
      expect(o1.runs.handedBackPeriod).toBe(o0.runs.handedBackPeriod + 1);
      expect(o1.runs.failedToday).toBe(o0.runs.failedToday + 1);
      expect(o1.runs.today).toBe(o0.runs.today + 2);
      expect(o1.runs.period).toBe(o0.runs.period + 2);
      expect(o1.users.total).toBeGreaterThan(o0.users.total);
      expect(o1.users.activeThisPeriod).toBe(o0.users.activeThisPeriod + 1);
      expect(o1.requests.last24h).toBeGreaterThan(o0.requests.last24h);
      expect(o1.requests.logEnabled).toBe(true);
      expect(o1.period).toBe(server.clock.now().toISOString().slice(0, 7));
      expect(o1.machines).toEqual({ paired: 0, online: 0 });
      // The failed run heads the recent failures, with its stop code.
      expect(o1.recentFailures[0]).toMatchObject({ user: "overview-user", code: "script_failed", message: "boom" });
      expect(o1.previous.period).toMatch(/^\d{4}-\d{2}$/);
      // The figures equal the ledger's: this month's tokens and spend are the usage rows' sums.
      const rows = (await json(server.fetch(`/v1/usage?limit=500`, { headers: bearer(server.dev.appKey) }))).data as { inputTokens: number; outputTokens: number; cacheReadTokens: number; cacheWriteTokens: number; amountMicros: number; period: string }[];
      const thisMonth = rows.filter((r) => r.period === o1.period);
      expect(o1.tokens.period).toBe(thisMonth.reduce((n, r) => n + r.inputTokens + r.outputTokens + r.cacheReadTokens + r.cacheWriteTokens, 0));
      expect(o1.spend.periodMicros).toBe(thisMonth.reduce((n, r) => n + r.amountMicros, 0));
      const live = await json(owner.fetch(`/v1/owner/apps/${server.dev.appId}/env/live/overview`));
      expect(live.runs).toEqual({ today: 0, period: 0, failedToday: 0, handedBackToday: 0, handedBackPeriod: 0, live: 0, paused: 0 });
      expect(live.requests.last24h).toBe(0);
    });
  });
});
