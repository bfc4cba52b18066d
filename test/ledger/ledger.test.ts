import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { apiClient } from "../helpers/api.js";
import { tableCounts } from "../helpers/snapshot.js";

/**
 * The ledger's reads and the plans' rules through the real HTTP API, on each
 * database: plans configured by the app, runs counted at their start (handbacks
 * included), 402 at a stopping allowance, token plans exact after the app's
 * usage report, overage priced, spend ceilings, yearly windows, plans set by
 * the app, and the usage rows paged and filtered.
 */
onEachDatabase("ledger and plans on $db.name", (db) => {
  let server: TestServer;
  let api: ReturnType<typeof apiClient>;

  beforeAll(async () => {
    server = await startTestServerOn(db);
    api = apiClient(server, server.dev.appKey);
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  /** A run the app serves itself (route `app` only): counted at its start, 409 serve_in_app, or 402. */
  const handback = (user: string) => api("POST", "/v1/runs", { user, model: "auto", prompt: "hi", route: { prefer: ["app"] } });
  const runIdOf = (r: { headers: Headers }) => r.headers.get("service-run-id")!;

  it("plans: created, listed, changed field by field, one default at a time, archived; bad input changes nothing", async () => {
    const free = await api("POST", "/v1/plans", { slug: "free", name: "Free", allowance: { unit: "runs", limit: 3 }, isDefault: true });
    expect(free.status).toBe(201);
    expect(free.body).toMatchObject({ slug: "free", priceMicros: 0, currency: "usd", period: "month", allowance: { unit: "runs", limit: 3 }, overage: false, isDefault: true, archived: false });
    const pro = await api("POST", "/v1/plans", {
      slug: "pro", name: "Pro", priceMicros: 9_900_000, allowance: { unit: "runs", limit: 100 }, trialDays: 14, stripePriceId: "price_pro", spendCeilingMicros: 50_000_000,
    });
    expect(pro.status).toBe(201);
    expect((await api("POST", "/v1/plans", { slug: "pro", name: "Again" })).status).toBe(409);

    const before = await tableCounts(server.db);
    const bad = [
      { slug: "Bad Slug", name: "x" },
      { slug: "x", name: "x", priceMicros: 1.5 },
      { slug: "x", name: "x", priceMicros: -1 },
      { slug: "x", name: "x", overagePriceMicros: 10 },
      { slug: "x", name: "x", overage: true },
      { slug: "x", name: "x", allowance: { unit: "minutes", limit: 3 } },
    ];
    for (const b of bad) {
      const r = await api("POST", "/v1/plans", b);
      expect(r.status, JSON.stringify(b)).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
    }
    expect((await api("PATCH", "/v1/plans/nope", { name: "x" })).status).toBe(404);
    expect(await tableCounts(server.db)).toEqual(before);

    const renamed = await api("PATCH", "/v1/plans/pro", { name: "Pro+", isDefault: true });
    expect(renamed.body).toMatchObject({ name: "Pro+", priceMicros: 9_900_000, trialDays: 14, isDefault: true, allowance: { limit: 100 } });
    let list = (await api("GET", "/v1/plans")).body.data;
    expect(list.filter((p: { isDefault: boolean }) => p.isDefault).map((p: { slug: string }) => p.slug)).toEqual(["pro"]);
    await api("PATCH", "/v1/plans/free", { isDefault: true });

    await api("POST", "/v1/plans", { slug: "legacy", name: "Legacy" });
    expect((await api("DELETE", "/v1/plans/legacy")).body).toMatchObject({ archived: true, isDefault: false });
    list = (await api("GET", "/v1/plans")).body.data;
    expect(list.map((p: { slug: string }) => p.slug)).toEqual(["free", "pro"]);
    expect((await api("GET", "/v1/plans?archived=true")).body.data.map((p: { slug: string }) => p.slug)).toContain("legacy");
    expect((await api("PUT", "/v1/users/someone/plan", { plan: "legacy" })).status).toBe(409);

    // Another environment's key sees none of them.
    const live = apiClient(server, await liveKey());
    expect((await live("GET", "/v1/plans")).body.data).toEqual([]);
  });

  async function liveKey(): Promise<string> {
    const { KeyService } = await import("../../server/keys/keys.js");
    const keys = new KeyService(server.db.prisma, server.clock, server.db);
    return (await keys.createKeys(server.dev.appId, "live")).appKey;
  }

  it("a run is counted at its start, handback included; the run that would pass a stopping allowance gets 402 and nothing is written", async () => {
    for (let i = 0; i < 3; i++) expect((await handback("ann")).status).toBe(409);
    const before = await tableCounts(server.db);
    const refused = await handback("ann");
    expect(refused.status).toBe(402);
    expect(refused.body.error.code).toBe("allowance_exhausted");
    expect(refused.headers.get("service-run-id")).toBeNull();
    const after = await tableCounts(server.db);
    expect({ ...after, webhook_deliveries: 0 }).toEqual({ ...before, webhook_deliveries: 0 });

    const ann = (await api("GET", "/v1/users/ann")).body;
    expect(ann).toMatchObject({
      id: "ann",
      plan: { slug: "free" },
      subscription: null,
      allowance: {
        unit: "runs", limit: 3, used: 3, remaining: 0, reached: true,
        // The window, as an app shows it: "3 of 3 runs, resets on 1 December".
        period: "2026-11", windowStart: "2026-11-01T00:00:00.000Z", resetsAt: "2026-12-01T00:00:00.000Z",
        spend: { usedMicros: 0, ceilingMicros: null, remainingMicros: null, reached: false },
      },
      usage: { period: "2026-11", runs: 3, inputTokens: 0, outputTokens: 0, amountMicros: 0 },
      connected: { machines: 0, online: 0, runtimes: [] },
    });
    // The 402 carries the same standing, so the app needs no second call.
    expect(refused.body.error.allowance).toEqual(ann.allowance);
    expect(refused.body.error.message).toContain("resets at 2026-12-01T00:00:00.000Z");
    const rows = (await api("GET", "/v1/usage?user=ann")).body.data;
    expect(rows).toHaveLength(3);
    expect(rows.every((r: { costClass: string; kind: string }) => r.costClass === "app_served" && r.kind === "run")).toBe(true);
    expect((await api("GET", "/v1/users/nobody")).status).toBe(404);
  });

  it("a plan set by the app changes the allowance at once; null puts the user back on the default", async () => {
    const set = await api("PUT", "/v1/users/ann/plan", { plan: "pro" });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ plan: { slug: "pro" }, subscription: { status: "active", source: "app" }, allowance: { limit: 100, used: 3, remaining: 97, reached: false } });
    expect((await handback("ann")).status).toBe(409);
    const back = await api("PUT", "/v1/users/ann/plan", { plan: null });
    expect(back.body).toMatchObject({ plan: { slug: "free" }, subscription: null, allowance: { limit: 3, used: 4 } });
    expect((await handback("ann")).status).toBe(402);
    expect((await api("PUT", "/v1/users/ann/plan", { plan: "nope" })).status).toBe(404);
  });

  it("a token plan stays exact after a handback: the usage the app reports counts, and the next run past it gets 402", async () => {
    await api("POST", "/v1/plans", { slug: "tokens", name: "Tokens", allowance: { unit: "tokens", limit: 100 } });
    await api("PUT", "/v1/users/tom/plan", { plan: "tokens" });
    const first = await handback("tom");
    expect(first.status).toBe(409);
    expect((await api("POST", `/v1/runs/${runIdOf(first)}/usage`, { inputTokens: 60, outputTokens: 30, costMicros: 1234 })).status).toBe(200);
    const second = await handback("tom");
    expect(second.status).toBe(409);
    expect((await api("POST", `/v1/runs/${runIdOf(second)}/usage`, { inputTokens: 5, outputTokens: 5 })).status).toBe(200);
    const tom = (await api("GET", "/v1/users/tom")).body;
    expect(tom.allowance).toMatchObject({ unit: "tokens", limit: 100, used: 100, remaining: 0, reached: true });
    expect(tom.usage).toMatchObject({ runs: 2, inputTokens: 65, outputTokens: 35, amountMicros: 1234 });
    expect((await handback("tom")).status).toBe(402);
    const rows = (await api("GET", "/v1/usage?user=tom&costClass=app_served")).body.data;
    expect(rows.map((r: { kind: string }) => r.kind).sort()).toEqual(["app_usage", "app_usage", "run", "run"]);
    expect(rows.reduce((s: number, r: { amountMicros: number }) => s + r.amountMicros, 0)).toBe(tom.usage.amountMicros);
  });

  it("an overage plan runs past its allowance at the overage price, until the spend ceiling stops new runs (402)", async () => {
    await api("POST", "/v1/plans", { slug: "metered", name: "Metered", allowance: { unit: "runs", limit: 1 }, overage: true, overagePriceMicros: 400_000, spendCeilingMicros: 1_000_000 });
    await api("PUT", "/v1/users/olga/plan", { plan: "metered" });
    expect((await handback("olga")).status).toBe(409); // within the allowance: 0
    expect((await handback("olga")).status).toBe(409); // overage: 400,000
    expect((await handback("olga")).status).toBe(409); // overage: 800,000
    const refused = await handback("olga"); // 1,200,000 would pass the ceiling
    expect(refused.status).toBe(402);
    expect(refused.body.error.code).toBe("spend_ceiling_reached");
    const rows = (await api("GET", "/v1/usage?user=olga")).body.data;
    expect(rows.map((r: { amountMicros: number }) => r.amountMicros)).toEqual([0, 400_000, 400_000]);
    const olga = (await api("GET", "/v1/users/olga")).body;
    expect(olga).toMatchObject({ allowance: { limit: 1, used: 3, remaining: 0, reached: true }, usage: { amountMicros: 800_000 } });
    // Spend against the ceiling, in the view and in the 402: the next run's 400,000 would pass what is left.
    expect(olga.allowance.spend).toEqual({ usedMicros: 800_000, ceilingMicros: 1_000_000, remainingMicros: 200_000, reached: false });
    expect(refused.body.error.allowance).toEqual(olga.allowance);
  });

  it("a tokens plan with overage prices the tokens past its allowance per 1,000, reported by the app or run on the user's compute, up to the spend ceiling", async () => {
    await api("POST", "/v1/plans", { slug: "tokmeter", name: "Token meter", allowance: { unit: "tokens", limit: 1000 }, overage: true, overagePriceMicros: 2_000, spendCeilingMicros: 10_000 });
    await api("PUT", "/v1/users/tina/plan", { plan: "tokmeter" });
    const first = await handback("tina");
    expect((await api("POST", `/v1/runs/${runIdOf(first)}/usage`, { inputTokens: 600, outputTokens: 300 })).body.amountMicros).toBe(0); // 900 of 1,000
    const second = await handback("tina");
    // 1,500 tokens: 100 inside the allowance, 1,400 past it at 2,000 µ per 1,000 = 2,800 µ (plus the app's own cost).
    expect((await api("POST", `/v1/runs/${runIdOf(second)}/usage`, { inputTokens: 1000, outputTokens: 500, costMicros: 7 })).body.amountMicros).toBe(2_807);
    const third = await handback("tina");
    expect((await api("POST", `/v1/runs/${runIdOf(third)}/usage`, { inputTokens: 4000, outputTokens: 0 })).body.amountMicros).toBe(8_000);
    const tina = (await api("GET", "/v1/users/tina")).body;
    expect(tina.usage).toMatchObject({ inputTokens: 5600, outputTokens: 800, amountMicros: 10_807 });
    expect(tina.allowance).toMatchObject({ unit: "tokens", limit: 1000, used: 6400, reached: true });
    const refused = await handback("tina"); // 10,807 µ spent: the ceiling of 10,000 is reached
    expect(refused.status).toBe(402);
    expect(refused.body.error.code).toBe("spend_ceiling_reached");
  });

  it("a monthly allowance starts again next month; a yearly one counts the whole year", async () => {
    await api("POST", "/v1/plans", { slug: "yearly", name: "Yearly", period: "year", allowance: { unit: "runs", limit: 2 } });
    await api("PUT", "/v1/users/yuri/plan", { plan: "yearly" });
    await api("PUT", "/v1/users/mia/plan", { plan: "free" });
    expect((await handback("yuri")).status).toBe(409);
    for (let i = 0; i < 3; i++) expect((await handback("mia")).status).toBe(409);
    expect((await handback("mia")).status).toBe(402);
    server.clock.advance(10 * 86400); // 2026-12-02
    expect((await handback("mia")).status).toBe(409);
    expect((await handback("yuri")).status).toBe(409);
    expect((await handback("yuri")).status).toBe(402);
    expect((await api("GET", "/v1/users/yuri")).body).toMatchObject({
      usage: { period: "2026", runs: 2 },
      allowance: { used: 2, reached: true, period: "2026", windowStart: "2026-01-01T00:00:00.000Z", resetsAt: "2027-01-01T00:00:00.000Z" },
    });
    expect((await api("GET", "/v1/users/mia")).body).toMatchObject({
      usage: { period: "2026-12", runs: 1 },
      allowance: { used: 1, remaining: 2, period: "2026-12", windowStart: "2026-12-01T00:00:00.000Z", resetsAt: "2027-01-01T00:00:00.000Z" },
    });
    const nov = (await api("GET", "/v1/usage?user=mia&period=2026-11")).body.data;
    expect(nov).toHaveLength(3);
  });

  it("usage rows: paged by cursor with no row twice, filtered, amounts as integers; wrong environment 403, bad cursor 400", async () => {
    const all: { id: string }[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { data: { id: string }[]; hasMore: boolean; nextCursor: string | null } } = await api("GET", `/v1/usage?limit=4${cursor ? `&cursor=${cursor}` : ""}`);
      all.push(...page.body.data);
      cursor = page.body.nextCursor;
      expect(page.body.hasMore).toBe(cursor !== null);
    } while (cursor);
    const count = await server.db.query<{ n: string | number }>("SELECT count(*) AS n FROM usage_rows");
    expect(all).toHaveLength(Number(count[0].n));
    expect(new Set(all.map((r) => r.id)).size).toBe(all.length);
    const run = (await api("GET", "/v1/usage?user=tom")).body.data[0].runId;
    expect((await api("GET", `/v1/usage?run=${run}`)).body.data.every((r: { runId: string }) => r.runId === run)).toBe(true);
    expect((await api("GET", "/v1/usage?environment=live")).status).toBe(403);
    expect((await api("GET", "/v1/usage?environment=test")).status).toBe(200);
    expect((await api("GET", "/v1/usage?cursor=abc")).status).toBe(400);
    expect((await api("GET", "/v1/usage?period=2026-1")).status).toBe(400);
    expect((await api("GET", "/v1/usage?costClass=gold")).status).toBe(400);
  });

  it("numbers past what JSON carries exactly, a cursor past BIGINT, and strings Postgres cannot store are 400s that change nothing", async () => {
    const before = await tableCounts(server.db);
    expect((await api("GET", "/v1/usage?cursor=9999999999999999999")).status).toBe(400);
    expect((await api("POST", "/v1/plans", { slug: "huge", name: "Huge", priceMicros: 2 ** 60 })).status).toBe(400);
    expect((await api("PATCH", "/v1/plans/free", { allowance: { unit: "runs", limit: 1e21 } })).status).toBe(400);
    const echo = async (content: string) =>
      server.fetch("/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
        body: `{"model":"svc/echo","user":"nul","messages":[{"role":"user","content":"${content}"}]}`,
      });
    for (const bad of ["a\\u0000b", "lone \\ud800 high", "lone \\udc00 low"]) {
      const r = await echo(bad);
      expect(r.status, bad).toBe(400);
      expect((await r.json()).error.code).toBe("invalid_json");
    }
    expect((await echo("a pair \\ud83d\\ude00 is fine")).status).toBe(200);
    const after = await tableCounts(server.db);
    expect(after.usage_rows).toBe(before.usage_rows + 1);
    expect((await api("POST", "/v1/runs/run_any/usage", { inputTokens: 1e20, outputTokens: 1 })).status).toBe(400);
  });

  it("allowance.reached is recorded once per user and window for the app's webhook endpoints", async () => {
    await server.db.query(
      `INSERT INTO webhook_endpoints (id, app_id, environment, url, secret, event_types) VALUES ('we_ledger', $1, 'test', 'http://127.0.0.1:9/hook', 'sealed', ARRAY['allowance.reached'])`,
      [server.dev.appId],
    );
    await api("POST", "/v1/plans", { slug: "two", name: "Two", allowance: { unit: "runs", limit: 2 } });
    await api("PUT", "/v1/users/rex/plan", { plan: "two" });
    await handback("rex");
    await handback("rex"); // the last one of the allowance
    await handback("rex"); // 402
    await handback("rex"); // 402
    // The fact is recorded beside the run's start, not in its statement: wait for what is still being recorded.
    await server.services.webhooks.facts.drain();
    const rows = await server.db.query<{ event_type: string; payload: { data: { user: string; used: number; allowance: number } } }>(
      `SELECT event_type, payload FROM webhook_deliveries WHERE endpoint_id = 'we_ledger'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].payload.data).toMatchObject({ user: "rex", allowance: 2, used: 2 });
  });
});
