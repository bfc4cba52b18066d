import { afterAll, beforeAll, expect, it } from "vitest";
import { WebhookVerificationError, Webhook } from "standardwebhooks";
import type { z } from "zod";
import type { WebhookDelivery, WebhookDeliveryPage } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { bearer, expectError } from "../helpers/requests.js";
import { startReceiver, verified, type Receiver } from "../helpers/webhook-receiver.js";

type Delivery = z.infer<typeof WebhookDelivery>;

/**
 * Outbound webhooks end to end, on each database: the real server (a short retry
 * schedule and timeout), real HTTP receivers, and facts made through the real
 * endpoints (pairing a machine is `machine.paired`). Each test has its own app.
 */
/**
 * How long a delivery attempt waits for the receiver. Short, so the hanging receiver's retries take
 * seconds; not so short that a loaded machine (the whole suite on 2 cores) makes a prompt 200 time out.
 */
const TIMEOUT_MS = 1500;

onEachDatabase("webhooks to the app on $db.name", (db) => {
  let server: TestServer;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    // The receivers are on this machine: the operator lets test endpoints reach private addresses (refused by default).
    server = await startTestServerOn(db, { WEBHOOK_RETRY_SCHEDULE: "0.2,0.4,0.8", WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS), WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
  });
  afterAll(async () => {
    await server?.close();
    for (const r of receivers) await r.close();
    removeTempDirs();
  });

  const receiver = async (...args: Parameters<typeof startReceiver>) => {
    const r = await startReceiver(...args);
    receivers.push(r);
    return r;
  };
  const newApp = (name: string) => server.services.keys.createApp(name, "test");
  const call = (appKey: string, method: string, path: string, body?: unknown) =>
    server.fetch(path, { method, headers: { ...bearer(appKey), ...(body !== undefined ? { "content-type": "application/json" } : {}) }, body: body === undefined ? undefined : JSON.stringify(body) });
  async function createEndpoint(appKey: string, url: string, events?: string[]) {
    const res = await call(appKey, "POST", "/v1/webhook_endpoints", { url, ...(events ? { events } : {}) });
    expect(res.status).toBe(201);
    return (await res.json()) as { id: string; url: string; events: string[]; secret: string; disabled: boolean; createdAt: string };
  }
  async function deliveries(appKey: string, query = ""): Promise<z.infer<typeof WebhookDeliveryPage>> {
    const res = await call(appKey, "GET", `/v1/webhook_deliveries${query}`);
    expect(res.status).toBe(200);
    return (await res.json()) as z.infer<typeof WebhookDeliveryPage>;
  }
  const settled = (appKey: string, count: number, query = "") =>
    pollUntil(() => deliveries(appKey, query), (p) => p.data.length >= count && p.data.every((d) => d.status !== "pending"), 20_000, "deliveries settled");

  it("shows the secret once and stores it sealed; a machine.paired webhook verifies with standardwebhooks, a tampered one does not", async () => {
    const keys = await newApp("Signed");
    const hook = await receiver();
    const created = await createEndpoint(keys.appKey, hook.url, ["machine.paired"]);
    expect(created).toMatchObject({ url: hook.url, events: ["machine.paired"], disabled: false });
    expect(created.id).toMatch(/^we_/);
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);

    // Never shown again, and not readable from the database.
    const list = await (await call(keys.appKey, "GET", "/v1/webhook_endpoints")).json();
    expect(list).toEqual({ data: [{ id: created.id, url: hook.url, events: ["machine.paired"], disabled: false, createdAt: created.createdAt, warning: null }] });
    const [row] = await server.db.query<{ secret: string }>("SELECT secret FROM webhook_endpoints WHERE id = $1", [created.id]);
    expect(row.secret).toMatch(/^sealed:v1:/);
    expect(row.secret).not.toContain(created.secret.slice("whsec_".length, "whsec_".length + 12));
    expect(server.logs.join("")).not.toContain(created.secret.slice("whsec_".length));

    const machine = await pairViaApi(server, keys, "alice", {}, "laptop-1");
    const [got] = await hook.waitFor(1);
    expect(got.headers["content-type"]).toBe("application/json");
    expect(got.headers["webhook-id"]).toMatch(/^msg_/);
    expect(Math.abs(Number(got.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(30);
    const payload = verified(created.secret, got);
    expect(payload).toEqual({
      type: "machine.paired",
      timestamp: expect.any(String),
      data: { machineId: machine.machineId, user: "alice", hostname: "laptop-1", platform: "linux" },
    });

    // Any change to the body, or another secret, fails verification.
    const tampered = { ...got, body: got.body.replace("laptop-1", "laptop-2") };
    expect(() => verified(created.secret, tampered)).toThrow(WebhookVerificationError);
    expect(() => new Webhook(`whsec_${Buffer.alloc(24, 7).toString("base64")}`).verify(got.body, got.headers)).toThrow(WebhookVerificationError);

    const page = await settled(keys.appKey, 1);
    expect(page.data).toHaveLength(1);
    expect(page.data[0]).toMatchObject({ id: got.headers["webhook-id"], endpointId: created.id, type: "machine.paired", status: "delivered", payload, nextAttemptAt: null, lastError: null });
    expect(page.data[0].attempts).toEqual([{ attempt: 1, at: expect.any(String), statusCode: 200, error: null, durationMs: expect.any(Number) }]);
    await hook.close();
    expect(hook.received).toHaveLength(1);
  });

  it("retries a failing receiver with the same webhook-id and backoff; the delivery log shows every attempt and the outcome", async () => {
    const keys = await newApp("Retries");
    // Fails twice, then takes it.
    const flaky = await receiver((n) => (n <= 2 ? 500 : 200));
    // Answers 503 once, then never answers in time.
    const dead = await receiver((n) => (n === 1 ? 503 : "hang"));
    // Sends the service elsewhere: never followed.
    const moved = await receiver(() => 302);
    const a = await createEndpoint(keys.appKey, flaky.url, ["machine.paired"]);
    const b = await createEndpoint(keys.appKey, dead.url, ["machine.paired"]);
    const c = await createEndpoint(keys.appKey, moved.url, ["machine.paired"]);
    await pairViaApi(server, keys, "bob");

    const page = await settled(keys.appKey, 3);
    const of = (id: string) => page.data.find((d) => d.endpointId === id)!;

    // 500, 500, 200: delivered on the third try, each a verifiable request with the same id.
    expect(of(a.id)).toMatchObject({ status: "delivered", nextAttemptAt: null, lastError: null });
    expect(of(a.id).attempts.map((x) => [x.attempt, x.statusCode, x.error])).toEqual([
      [1, 500, "HTTP 500"],
      [2, 500, "HTTP 500"],
      [3, 200, null],
    ]);
    expect(flaky.received).toHaveLength(3);
    expect(new Set(flaky.received.map((r) => r.headers["webhook-id"]))).toEqual(new Set([of(a.id).id]));
    for (const r of flaky.received) expect(verified(a.secret, r).type).toBe("machine.paired");
    // The retries waited as the schedule says (0.2 s, then 0.4 s).
    expect(flaky.received[1].at - flaky.received[0].at).toBeGreaterThanOrEqual(180);
    expect(flaky.received[2].at - flaky.received[1].at).toBeGreaterThanOrEqual(380);

    // 503, then timeouts: every retry used (1 + 3 attempts), then failed for good.
    expect(of(b.id)).toMatchObject({ status: "failed", nextAttemptAt: null, deliveredAt: null });
    expect(of(b.id).lastError).toBe(`timed out after ${TIMEOUT_MS} ms`);
    expect(of(b.id).attempts.map((x) => x.attempt)).toEqual([1, 2, 3, 4]);
    expect(of(b.id).attempts[0]).toMatchObject({ statusCode: 503, error: "HTTP 503" });
    for (const x of of(b.id).attempts.slice(1)) expect(x).toMatchObject({ statusCode: null, error: `timed out after ${TIMEOUT_MS} ms` });
    expect(dead.received).toHaveLength(4);
    expect(new Set(dead.received.map((r) => r.headers["webhook-id"])).size).toBe(1);

    // A redirect is a failed attempt; the place it points to is never called.
    expect(of(c.id).status).toBe("failed");
    expect(of(c.id).attempts.map((x) => x.statusCode)).toEqual([302, 302, 302, 302]);
    expect(of(c.id).attempts[0].error).toMatch(/redirects are not followed/);
    expect(moved.received.every((r) => r.path === "/hook")).toBe(true);
    // Nor does the log say where it pointed.
    expect(JSON.stringify(of(c.id))).not.toContain("/landed");

    // Filters: by outcome and by endpoint.
    expect((await deliveries(keys.appKey, "?status=failed")).data.map((d) => d.endpointId).sort()).toEqual([b.id, c.id].sort());
    expect((await deliveries(keys.appKey, `?endpoint=${a.id}`)).data.map((d) => d.id)).toEqual([of(a.id).id]);
  });

  it("sends only the event types an endpoint asked for; a deleted endpoint gets nothing more and its pending delivery stops", async () => {
    const keys = await newApp("Filtering");
    const runsOnly = await receiver();
    const paired = await receiver();
    const gone = await receiver();
    let release: () => void = () => {};
    const held = new Promise<number>((r) => (release = () => r(500)));
    const slow = await receiver(() => held);
    const e1 = await createEndpoint(keys.appKey, runsOnly.url, ["run.finished"]);
    const e2 = await createEndpoint(keys.appKey, paired.url, ["machine.paired", "machine.online"]);
    const e3 = await createEndpoint(keys.appKey, gone.url);
    const e4 = await createEndpoint(keys.appKey, slow.url, ["machine.paired"]);
    expect(e3.events).toEqual(["run.finished", "machine.paired", "machine.online", "machine.offline", "plan.changed", "allowance.reached", "allowance.threshold", "run.paused", "run.resumed", "runtime.window_spent", "runtime.window_reset"]);

    const del = await call(keys.appKey, "DELETE", `/v1/webhook_endpoints/${e3.id}`);
    expect(del.status).toBe(200);
    expect(await del.json()).toMatchObject({ id: e3.id, disabled: true });

    await pairViaApi(server, keys, "carol");
    await paired.waitFor(1);
    // The slow receiver holds the first attempt; the endpoint is deleted meanwhile.
    await slow.waitFor(1);
    expect((await call(keys.appKey, "DELETE", `/v1/webhook_endpoints/${e4.id}`)).status).toBe(200);
    release();
    const page = await settled(keys.appKey, 2);
    await new Promise((r) => setTimeout(r, 1500)); // longer than the whole retry schedule

    expect(runsOnly.received).toHaveLength(0);
    expect(gone.received).toHaveLength(0);
    expect(slow.received).toHaveLength(1);
    expect(paired.received).toHaveLength(1);
    expect(page.data.map((d) => d.endpointId).sort()).toEqual([e2.id, e4.id].sort());
    const stopped = (await deliveries(keys.appKey, `?endpoint=${e4.id}`)).data[0];
    expect(stopped).toMatchObject({ status: "failed", lastError: "the endpoint was deleted", nextAttemptAt: null });
    // The attempt under way when it was deleted is logged (500, or a timeout if it held past TIMEOUT_MS); none followed.
    expect(stopped.attempts).toHaveLength(1);
    expect((await deliveries(keys.appKey, "?type=run.finished")).data).toEqual([]);

    // Deleted endpoints stay listed, disabled; deleting again answers the same.
    const list = (await (await call(keys.appKey, "GET", "/v1/webhook_endpoints")).json()) as { data: { id: string; disabled: boolean }[] };
    expect(list.data.map((e) => [e.id, e.disabled])).toEqual([
      [e1.id, false],
      [e2.id, false],
      [e3.id, true],
      [e4.id, true],
    ]);
    expect((await call(keys.appKey, "DELETE", `/v1/webhook_endpoints/${e3.id}`)).status).toBe(200);
  });

  it("another app or environment cannot read or delete an endpoint or its log (404, as unknown)", async () => {
    const owner = await newApp("Owner");
    const other = await newApp("Other");
    const live = await server.services.keys.createKeys(owner.appId, "live");
    const hook = await receiver();
    const e = await createEndpoint(owner.appKey, hook.url, ["machine.paired"]);
    await pairViaApi(server, owner, "dave");
    await settled(owner.appKey, 1);

    for (const keys of [other, live]) {
      expect(await (await call(keys.appKey, "GET", "/v1/webhook_endpoints")).json()).toEqual({ data: [] });
      expect((await deliveries(keys.appKey)).data).toEqual([]);
      expect((await deliveries(keys.appKey, `?endpoint=${e.id}`)).data).toEqual([]);
      await expectError(await call(keys.appKey, "DELETE", `/v1/webhook_endpoints/${e.id}`), 404, "not_found");
    }
    await expectError(await call(owner.appKey, "DELETE", "/v1/webhook_endpoints/we_nosuchendpoint"), 404, "not_found");
    expect((await deliveries(owner.appKey)).data).toHaveLength(1);
    expect((await (await call(owner.appKey, "GET", "/v1/webhook_endpoints")).json()).data[0]).toMatchObject({ id: e.id, disabled: false });
  });

  it("pages the log newest first with a cursor", async () => {
    const keys = await newApp("Pages");
    const hook = await receiver();
    await createEndpoint(keys.appKey, hook.url, ["machine.paired"]);
    for (const user of ["u1", "u2", "u3"]) await pairViaApi(server, keys, user);
    await settled(keys.appKey, 3);
    const first = await deliveries(keys.appKey, "?limit=2");
    expect(first.data).toHaveLength(2);
    expect(first.hasMore).toBe(true);
    const second = await deliveries(keys.appKey, `?limit=2&cursor=${first.nextCursor}`);
    expect(second).toMatchObject({ hasMore: false, nextCursor: null });
    const all: Delivery[] = [...first.data, ...second.data];
    expect(all.map((d) => (d.payload as { data: { user: string } }).data.user)).toEqual(["u3", "u2", "u1"]);
    expect(new Set(all.map((d) => d.id)).size).toBe(3);
  });

  it("refuses bad input with a 4xx in the envelope", async () => {
    const keys = await newApp("Bad input");
    const post = (body: unknown) => call(keys.appKey, "POST", "/v1/webhook_endpoints", body);
    expect((await expectError(await post({}), 400, "invalid_request")).error.param).toBe("url");
    expect((await expectError(await post({ url: "ftp://example.com/hook" }), 400, "invalid_request")).error.param).toBe("url");
    expect((await expectError(await post({ url: "not a url" }), 400, "invalid_request")).error.param).toBe("url");
    expect((await expectError(await post({ url: "https://example.com/h", events: [] }), 400, "invalid_request")).error.param).toBe("events");
    expect((await expectError(await post({ url: "https://example.com/h", events: ["run.started"] }), 400, "invalid_request")).error.param).toBe("events.0");
    const raw = await server.fetch("/v1/webhook_endpoints", { method: "POST", headers: { ...bearer(keys.appKey), "content-type": "application/json" }, body: "{" });
    await expectError(raw, 400, "invalid_json");
    await expectError(await server.fetch("/v1/webhook_endpoints"), 401, "missing_credential");
    for (const [query, param] of [
      ["?limit=0", "limit"],
      ["?limit=500", "limit"],
      ["?status=lost", "status"],
      ["?type=run.started", "type"],
      ["?cursor=garbage", "cursor"],
    ]) {
      expect((await expectError(await call(keys.appKey, "GET", `/v1/webhook_deliveries${query}`), 400, "invalid_request")).error.param).toBe(param);
    }
  });
});
