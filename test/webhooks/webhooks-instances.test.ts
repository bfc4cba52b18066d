import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import { onPostgres } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { startReceiver, verified, type Receiver } from "../helpers/webhook-receiver.js";


/**
 * Two instances on one Postgres, both dispatching: every attempt is sent by one
 * of them only (claims skip rows the other holds), the same fact reported on
 * both is one delivery, and a retry is one more attempt, not one per instance.
 */
onPostgres("webhooks across instances on postgres", (postgres) => {
  let a: TestServer;
  let b: TestServer;
  let drop: () => Promise<void>;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    const made = await postgres.create();
    drop = made.drop;
    // Instances sharing a database share the sealing key (docs/operators/security.md, "Secrets at rest").
    // The receivers are on this machine: test endpoints may reach private addresses (refused by default).
    const env = { WEBHOOK_RETRY_SCHEDULE: "0.2,0.4", WEBHOOK_PRIVATE_ADDRESSES: "test", SVC_SEALING_KEY: randomBytes(32).toString("base64") };
    a = await startTestServer(made.target, env, { runningClock: true });
    b = await startTestServer(made.target, env, { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    for (const r of receivers) await r.close();
    await drop?.();
    removeTempDirs();
  });

  it("sends each attempt once, whichever instance took it; a fact reported on both is one delivery", async () => {
    const ok = await startReceiver();
    // Fails the first attempt of every message, takes the second.
    const seen = new Set<string>();
    const flaky = await startReceiver((_n, r) => (seen.has(r.headers["webhook-id"]) ? 200 : (seen.add(r.headers["webhook-id"]), 500)));
    receivers.push(ok, flaky);
    const create = async (url: string) => {
      const res = await b.fetch("/v1/webhook_endpoints", { method: "POST", headers: { ...bearer(a.dev.appKey), "content-type": "application/json" }, body: JSON.stringify({ url, events: ["machine.online"] }) });
      expect(res.status).toBe(201);
      return ((await res.json()) as { secret: string }).secret;
    };
    const okSecret = await create(ok.url);
    await create(flaky.url);

    const tenant = { appId: a.dev.appId, environment: "test" as const };
    const facts = Array.from({ length: 30 }, (_, i) => `machine.online:mch_${i}:1`);
    await Promise.all(
      facts.flatMap((key, i) => [
        a.services.outbox.emit(tenant, "machine.online", { machineId: `mch_${i}`, user: "u" }, key),
        b.services.outbox.emit(tenant, "machine.online", { machineId: `mch_${i}`, user: "u" }, key),
      ]),
    );

    await ok.waitFor(30);
    await flaky.waitFor(60);
    const log = await pollUntil(
      async () => (await (await a.fetch("/v1/webhook_deliveries?limit=200", { headers: bearer(a.dev.appKey) })).json()) as { data: { id: string; status: string; attempts: unknown[] }[] },
      (p) => p.data.length === 60 && p.data.every((d) => d.status === "delivered"),
      20_000,
      "every delivery delivered",
    );
    await new Promise((r) => setTimeout(r, 500));

    const count = (r: Receiver) => {
      const n = new Map<string, number>();
      for (const x of r.received) n.set(x.headers["webhook-id"], (n.get(x.headers["webhook-id"]) ?? 0) + 1);
      return n;
    };
    expect(ok.received).toHaveLength(30);
    expect([...count(ok).values()].every((n) => n === 1)).toBe(true);
    expect(flaky.received).toHaveLength(60);
    expect([...count(flaky).values()].every((n) => n === 2)).toBe(true);
    expect(new Set(ok.received.map((r) => (verified(okSecret, r).data as { machineId: string }).machineId)).size).toBe(30);
    expect(log.data.map((d) => d.attempts.length).sort()).toEqual([...Array(30).fill(1), ...Array(30).fill(2)]);
  });

  it("an endpoint created on B gets the facts reported on A at once (A's kept interest is dropped by notification), and none once deleted on B", async () => {
    const r = await startReceiver();
    receivers.push(r);
    const tenant = { appId: a.dev.appId, environment: "test" as const };
    let n = 0;
    const report = () => a.services.webhooks.facts.planChanged(tenant, "interest-user", { plan: "pro" }, `plan.changed:interest:${n++}`);
    const rows = async () => Number((await a.db.query<{ n: string }>(`SELECT count(*) AS n FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE e.url = $1`, [r.url]))[0].n);
    // Nobody wants plan.changed yet: A reads that once and keeps it.
    await report();
    const res = await b.fetch("/v1/webhook_endpoints", { method: "POST", headers: { ...bearer(a.dev.appKey), "content-type": "application/json" }, body: JSON.stringify({ url: r.url, events: ["plan.changed"] }) });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    // Well within the 30 s a kept interest lives without a change heard: the notification reached A.
    await pollUntil(async () => (await report(), rows()), (x) => x > 0, 5_000, "a fact reported on A delivered to the endpoint made on B");
    await r.waitFor(1);
    expect((await b.fetch(`/v1/webhook_endpoints/${id}`, { method: "DELETE", headers: bearer(a.dev.appKey) })).status).toBe(200);
    const before = await rows();
    await report();
    expect(await rows()).toBe(before);
  });

  it("allowance.threshold at 80 % and 100 %: sent exactly once each with 20 runs started at once on both instances; none for a user short of 80 %", async () => {
    const r = await startReceiver();
    receivers.push(r);
    const headers = { ...bearer(a.dev.appKey), "content-type": "application/json" };
    const res = await a.fetch("/v1/webhook_endpoints", { method: "POST", headers, body: JSON.stringify({ url: r.url, events: ["allowance.threshold"] }) });
    expect(res.status).toBe(201);
    const { secret } = (await res.json()) as { secret: string };
    // Ten runs a month, then overage: all twenty run (handed back to the app), counted one after another.
    const plan = await a.fetch("/v1/plans", { method: "POST", headers, body: JSON.stringify({ slug: "ten-runs", name: "Ten runs", allowance: { unit: "runs", limit: 10 }, overage: true, overagePriceMicros: 100 }) });
    expect(plan.status).toBe(201);
    expect(((await plan.json()) as { alertThresholds: number[] }).alertThresholds).toEqual([80, 100]);
    for (const user of ["thr-ann", "thr-ben"]) {
      expect((await b.fetch(`/v1/users/${user}/plan`, { method: "PUT", headers, body: JSON.stringify({ plan: "ten-runs" }) })).status).toBe(200);
    }
    const start = (server: TestServer, user: string) => server.fetch("/v1/runs", { method: "POST", headers, body: JSON.stringify({ user, prompt: "x", route: { prefer: ["app"] } }) });
    const started = await Promise.all(Array.from({ length: 20 }, (_, i) => start(i % 2 ? a : b, "thr-ann")));
    expect(started.map((x) => x.status)).toEqual(Array(20).fill(409));
    // thr-ben: 7 of 10 (70 %), short of every threshold.
    await Promise.all(Array.from({ length: 7 }, (_, i) => start(i % 2 ? a : b, "thr-ben")));
    await r.waitFor(2);
    await new Promise((x) => setTimeout(x, 1500));
    const got = r.received.map((x) => verified(secret, x));
    expect(got.map((p) => [p.type, p.data.user, p.data.threshold]).sort()).toEqual([
      ["allowance.threshold", "thr-ann", 100],
      ["allowance.threshold", "thr-ann", 80],
    ]);
    const at80 = got.find((p) => p.data.threshold === 80)!.data as { measure: string; allowance: { limit: number; used: number; resetsAt: string } };
    expect(at80).toMatchObject({ measure: "allowance", allowance: { limit: 10 } });
    expect(at80.allowance.used).toBeGreaterThanOrEqual(8);
    const signals = await a.db.query<{ threshold: number; n: string }>(
      `SELECT s.threshold, count(*) AS n FROM plan_signals s JOIN end_users e ON e.id = s.end_user_id WHERE s.kind = 'threshold' AND e.external_id IN ('thr-ann', 'thr-ben') GROUP BY 1 ORDER BY 1`,
    );
    expect(signals.map((x) => [x.threshold, Number(x.n)])).toEqual([[80, 1], [100, 1]]);
  });
});
