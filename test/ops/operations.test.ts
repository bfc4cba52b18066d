import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { parseConfig } from "../../server/config.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer } from "../helpers/requests.js";
import { pairInto } from "../helpers/pair-via-api.js";
import { answerNothing, closeRawWorkers, connectWorkerDouble } from "../helpers/raw-worker.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { startReceiver, type Receiver } from "../helpers/webhook-receiver.js";
import type WebSocket from "ws";

/**
 * What an operator runs the service with: liveness and readiness probes, Prometheus
 * metrics behind a token (or on a private listener), and log lines that name the
 * path a request really had. Real servers, real HTTP, each database.
 */

const TOKEN = "metrics-token-0123456789abcdef";
const json = { "content-type": "application/json" };

/** One sample's value from the exposition text, or null when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | null {
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const m = /^([^{ ]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[3]);
  }
  return null;
}

afterAll(() => removeTempDirs());

describe("SVC_METRICS_TOKEN and SVC_METRICS_ADDR", () => {
  it("are parsed once; a short token or an address without a port stops the start naming it", () => {
    expect(parseConfig({}).metrics).toEqual({ token: null, listen: null });
    expect(parseConfig({ SVC_METRICS_TOKEN: TOKEN, SVC_METRICS_ADDR: "127.0.0.1:9464" }).metrics).toEqual({ token: TOKEN, listen: { host: "127.0.0.1", port: 9464 } });
    expect(parseConfig({ SVC_METRICS_ADDR: "[::1]:9464" }).metrics.listen).toEqual({ host: "::1", port: 9464 });
    expect(() => parseConfig({ SVC_METRICS_TOKEN: "short" })).toThrow(/SVC_METRICS_TOKEN/);
    expect(() => parseConfig({ SVC_METRICS_ADDR: "127.0.0.1" })).toThrow(/SVC_METRICS_ADDR/);
    expect(() => parseConfig({ SVC_METRICS_ADDR: "127.0.0.1:70000" })).toThrow(/SVC_METRICS_ADDR/);
  });
});

onEachDatabase("operations on $db.name", (db) => {
  let server: TestServer;
  let receiver: Receiver;
  const open: WebSocket[] = [];
  const scrape = async () => {
    const res = await server.fetch("/metrics", { headers: bearer(TOKEN) });
    expect(res.status).toBe(200);
    return res.text();
  };

  beforeAll(async () => {
    // The receiver refuses the first delivery: one attempt retrying, the next delivered.
    receiver = await startReceiver((n) => (n === 1 ? 500 : 200));
    server = await startTestServerOn(db, { SVC_METRICS_TOKEN: TOKEN, WEBHOOK_RETRY_SCHEDULE: "0.2,0.4", WEBHOOK_TIMEOUT_MS: "1000", WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    await closeRawWorkers(open);
    await server?.close();
    await receiver?.close();
  });

  it("/healthz and /readyz answer 200 {status: ok} with no credential", async () => {
    for (const path of ["/healthz", "/readyz"]) {
      const res = await server.fetch(path);
      expect(res.status, path).toBe(200);
      expect(await res.json()).toEqual({ status: "ok" });
      expect(res.headers.get("cache-control")).toBe("no-store");
    }
    expect((await server.fetch("/healthz", { method: "POST" })).status).toBe(405);
  });

  it("/metrics refuses a missing or wrong token with 401 in the envelope", async () => {
    const missing = await server.fetch("/metrics");
    expect(missing.status).toBe(401);
    expect((await missing.json()).error).toMatchObject({ code: "missing_credential", type: "authentication_error" });
    expect(missing.headers.get("www-authenticate")).toMatch(/^Bearer/);
    for (const wrong of [`${TOKEN}x`, TOKEN.slice(0, -1), "x"]) {
      const res = await server.fetch("/metrics", { headers: bearer(wrong) });
      expect(res.status).toBe(401);
      const body = await res.json();
      expect(body.error.code).toBe("invalid_credential");
      expect(body.error.requestId).toBe(res.headers.get("request-id"));
    }
    const ok = await server.fetch("/metrics", { headers: bearer(TOKEN) });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  });

  it("counts requests by route pattern and status (never a raw id), the ledger, runs, webhooks, the pool and the process", async () => {
    const before = await scrape();
    const ledgerBefore = sample(before, "svc_ledger_rows_written_total")!;
    expect(ledgerBefore).not.toBeNull();
    const finishedBefore = (status: string, route_kind: string) => sample(before, "svc_runs_finished_total", { status, route_kind }) ?? 0;

    // A webhook endpoint, then a fact it hears (a plan set by the app: plan.changed).
    const ep = await server.fetch("/v1/webhook_endpoints", { method: "POST", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ url: receiver.url, events: ["plan.changed"] }) });
    expect(ep.status).toBe(201);
    expect((await server.fetch("/v1/plans", { method: "POST", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ slug: "pro", name: "Pro", allowance: { unit: "runs", limit: 100 } }) })).status).toBe(201);
    expect((await server.fetch("/v1/users/ops-user/plan", { method: "PUT", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ plan: "pro" }) })).status).toBe(200);

    // A chat completion on svc/echo (no machine): a run and a ledger row.
    const chat = await server.fetch("/v1/chat/completions", { method: "POST", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ model: "svc/echo", messages: [{ role: "user", content: "hi" }], user: "ops-user" }) });
    expect(chat.status).toBe(200);
    const runId = chat.headers.get("service-run-id")!;
    expect(runId).toMatch(/^run_/);
    expect((await server.fetch(`/v1/runs/${runId}`, { headers: bearer(server.dev.appKey) })).status).toBe(200);
    expect((await server.fetch(`/v1/runs/run_doesnotexist`, { headers: bearer(server.dev.appKey) })).status).toBe(404);
    expect((await server.fetch(`/v1/nothing/here`)).status).toBe(404);
    await receiver.waitFor(2, 15_000);
    await pollUntil(scrape, (t) => sample(t, "svc_webhook_deliveries_total", { outcome: "delivered" }) === 1, 10_000, "the delivery counted");

    const after = await scrape();
    expect(sample(after, "svc_http_requests_total", { method: "POST", route: "/v1/chat/completions", status: "200" })).toBe(1);
    expect(sample(after, "svc_http_requests_total", { method: "GET", route: "/v1/runs/:id", status: "200" })).toBe(1);
    expect(sample(after, "svc_http_requests_total", { method: "GET", route: "/v1/runs/:id", status: "404" })).toBe(1);
    expect(sample(after, "svc_http_requests_total", { method: "GET", route: "unmatched", status: "404" })).toBe(1);
    expect(sample(after, "svc_http_requests_total", { method: "GET", route: "/metrics", status: "401" })).toBeGreaterThanOrEqual(4);
    expect(sample(after, "svc_http_request_duration_seconds_count", { method: "POST", route: "/v1/chat/completions", status: "200" })).toBe(1);
    expect(after).not.toContain(runId);
    expect(after).not.toContain("run_doesnotexist");
    expect(after).not.toContain("ops-user");

    expect(sample(after, "svc_ledger_rows_written_total")).toBe(ledgerBefore + 1);
    // Ended runs are counted as they end, by this instance: the chat completion on svc/echo (recorded whole, never routed),
    // a run on svc/echo (driven here, route service), and one handed to the app at its start. The gauge counts active runs only.
    const echoRun = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ user: "ops-user", model: "svc/echo", prompt: "hello" }) });
    expect(echoRun.status).toBe(200);
    expect(await echoRun.text()).toContain("run_completed");
    const handedBack = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ user: "ops-user", prompt: "hi", route: { prefer: ["app"] } }) });
    expect(handedBack.status).toBe(409);
    const ended = await pollUntil(scrape, (t) => sample(t, "svc_runs_finished_total", { status: "completed", route_kind: "service" }) === finishedBefore("completed", "service") + 1, 10_000, "the echo run's end counted");
    expect(sample(ended, "svc_runs_finished_total", { status: "completed", route_kind: "none" })).toBe(finishedBefore("completed", "none") + 1);
    expect(sample(ended, "svc_runs_finished_total", { status: "handed_back", route_kind: "app" })).toBe(finishedBefore("handed_back", "app") + 1);
    expect(sample(ended, "svc_runs", { status: "completed" })).toBeNull();
    expect(sample(after, "svc_webhook_deliveries_total", { outcome: "retrying" })).toBe(1);
    expect(sample(after, "svc_webhook_deliveries_total", { outcome: "failed" })).toBe(0);
    expect(sample(after, "svc_db_info", { kind: db.name === "pglite" ? "pglite" : "postgres" })).toBe(1);
    const total = sample(after, "svc_db_pool_connections", { state: "total" })!;
    if (db.name === "pglite") expect(total).toBe(1);
    else expect(total).toBeGreaterThanOrEqual(1);
    // Waiting is whatever queued at this instant (the scrape's own queries may): present, not negative.
    expect(sample(after, "svc_db_pool_connections", { state: "waiting" })).toBeGreaterThanOrEqual(0);
    expect(sample(after, "svc_db_pool_connections", { state: "idle" })).toBeGreaterThanOrEqual(0);
    expect(sample(after, "process_cpu_user_seconds_total")).toBeGreaterThan(0);
    expect(sample(after, "nodejs_heap_size_used_bytes")).toBeGreaterThan(0);
  });

  it("machines online, open streams and running runs follow a real machine and a run's stream", async () => {
    const quiet = await scrape();
    expect(sample(quiet, "svc_machines_online")).toBe(0);
    expect(sample(quiet, "svc_open_streams")).toBe(0);

    const paired = await pairInto(tempDir("svc-ops-"), server, server.dev, "ops-machine-user");
    const double = await connectWorkerDouble(server.url, paired.token, answerNothing, undefined, open);
    const abort = new AbortController();
    const run = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), ...json }, body: JSON.stringify({ user: "ops-machine-user", prompt: "wait" }), signal: abort.signal });
    expect(run.status).toBe(200);
    await double.waitJobs(1);
    const busy = await scrape();
    expect(sample(busy, "svc_machines_online")).toBe(1);
    expect(sample(busy, "svc_open_streams")).toBe(1);
    const active = ["queued", "running", "waiting"].reduce((n, status) => n + (sample(busy, "svc_runs", { status, route_kind: "user-hardware" }) ?? 0), 0);
    expect(active, busy.split("\n").filter((l) => l.startsWith("svc_runs")).join("\n")).toBe(1);

    abort.abort();
    await pollUntil(scrape, (t) => sample(t, "svc_open_streams") === 0, 10_000, "the stream's slot given back");
    await closeRawWorkers(open);
    await pollUntil(scrape, (t) => sample(t, "svc_machines_online") === 0, 10_000, "the machine gone");
  });

  it("metrics are per server: a second instance counts only its own requests", async () => {
    const other = await startTestServerOn(db, { SVC_METRICS_TOKEN: TOKEN });
    try {
      const text = await (await other.fetch("/metrics", { headers: bearer(TOKEN) })).text();
      expect(sample(text, "svc_http_requests_total", { method: "POST", route: "/v1/chat/completions", status: "200" })).toBeNull();
      expect(sample(text, "svc_webhook_deliveries_total", { outcome: "delivered" })).toBe(0);
    } finally {
      await other.close();
    }
  });

  it("a request's log line names its full path, without the query string", async () => {
    await server.fetch("/docs/?token=secret-in-query");
    await server.fetch("/v1/runs/run_logged?user=secret-user", { headers: bearer(server.dev.appKey) });
    const lines = server.logs.flatMap((l) => l.split("\n")).filter(Boolean).map((l) => JSON.parse(l)).filter((l) => l.msg === "request");
    const paths = lines.map((l) => l.path);
    expect(paths).toContain("/docs/");
    expect(paths).toContain("/v1/runs/run_logged");
    expect(server.logs.join("")).not.toContain("secret-in-query");
    expect(server.logs.join("")).not.toContain("secret-user");
  });
});

onEachDatabase("readiness and metrics access on $db.name", (db) => {
  it("without SVC_METRICS_TOKEN, /metrics on the public listener is 404 in the envelope; SVC_METRICS_ADDR serves it with no token", async () => {
    const server = await startTestServerOn(db, { SVC_METRICS_ADDR: "127.0.0.1:0" });
    try {
      const res = await server.fetch("/metrics", { headers: bearer(TOKEN) });
      expect(res.status).toBe(404);
      expect((await res.json()).error.code).toBe("route_not_found");
      expect(server.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      await server.fetch("/healthz");
      const text = await (await fetch(server.metricsUrl!)).text();
      expect(sample(text, "svc_http_requests_total", { method: "GET", route: "/healthz", status: "200" })).toBe(1);
      const elsewhere = await fetch(server.metricsUrl!.replace("/metrics", "/v1/runs"));
      expect(elsewhere.status).toBe(404);
      expect((await elsewhere.json()).error.code).toBe("route_not_found");
    } finally {
      await server.close();
    }
  });

  it("/readyz is 503 database_unavailable with Retry-After once the database stops answering; /healthz stays 200", async () => {
    const server = await startTestServerOn(db);
    try {
      expect((await server.fetch("/readyz")).status).toBe(200);
      let release = () => {};
      if (db.name === "pglite") {
        // The embedded database closed under the server: every query is refused.
        await server.db.close();
      } else {
        // Every pooled connection busy for 5 s: the trivial query waits past the 2 s limit.
        const busy = Array.from({ length: 10 }, () => server.db.query("SELECT pg_sleep(5)").catch(() => null));
        release = () => void Promise.all(busy);
        await new Promise((r) => setTimeout(r, 200));
      }
      const started = Date.now();
      const res = await server.fetch("/readyz");
      expect(res.status).toBe(503);
      expect(Date.now() - started).toBeLessThan(4500);
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
      const body = await res.json();
      expect(body.error).toMatchObject({ code: "database_unavailable", type: "api_error", requestId: res.headers.get("request-id") });
      expect(body.error.message).toMatch(db.name === "pglite" ? /refused a trivial query/ : /did not answer within 2 s/);
      expect((await server.fetch("/healthz")).status).toBe(200);
      release();
      if (db.name !== "pglite") await pollUntil(async () => (await server.fetch("/readyz")).status, (s) => s === 200, 15_000, "ready again");
    } finally {
      await server.close();
    }
  }, 60_000);
});
