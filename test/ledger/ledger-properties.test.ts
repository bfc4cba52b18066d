import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import fc from "fast-check";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { apiClient } from "../helpers/api.js";

/**
 * Property tests of the ledger (fast-check), on each database: any sequence of
 * run starts (handed back, so no machine is needed), chat-completion retries
 * with one Idempotency-Key, usage reports (and their repeats), reports for runs
 * that do not exist, plan changes and concurrent bursts leaves
 * - every read equal to the sum of the rows (GET /v1/users/:id against the rows of GET /v1/usage),
 * - no fact counted twice (one `run:` row per run, one `usage:` row per report, unique keys unique),
 * - a stopping allowance never passed, and exactly as many runs as the model of the plan allows.
 */
type Action =
  | { kind: "start" }
  | { kind: "chat"; retries: number }
  | { kind: "report"; which: number; input: number; output: number; cost: number; twice: boolean }
  | { kind: "reportUnknown" }
  | { kind: "burst"; n: number }
  | { kind: "plan"; plan: keyof typeof PLANS };

const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ kind: "start" as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("chat" as const), retries: fc.integer({ min: 0, max: 3 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("report" as const),
      which: fc.nat(20),
      input: fc.integer({ min: 0, max: 60 }),
      output: fc.integer({ min: 0, max: 60 }),
      cost: fc.integer({ min: 0, max: 5_000_000 }),
      twice: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "reportUnknown" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("burst" as const), n: fc.integer({ min: 2, max: 12 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("plan" as const), plan: fc.constantFrom("runs3" as const, "runs5" as const, "tokens" as const, "overage" as const, "tokmeter" as const) }) },
);

const PLANS = {
  runs3: { unit: "runs", limit: 3, overage: false },
  runs5: { unit: "runs", limit: 5, overage: false },
  tokens: { unit: "tokens", limit: 150, overage: false },
  overage: { unit: "runs", limit: 2, overage: true, price: 250_000 },
  tokmeter: { unit: "tokens", limit: 100, overage: true, price: 1_234 },
} as const;

onEachDatabase("ledger properties on $db.name", (db) => {
  let server: TestServer;
  let api: ReturnType<typeof apiClient>;
  let users = 0;

  beforeAll(async () => {
    server = await startTestServerOn(db);
    api = apiClient(server, server.dev.appKey);
    await api("POST", "/v1/plans", { slug: "runs3", name: "Three", allowance: { unit: "runs", limit: 3 }, isDefault: true });
    await api("POST", "/v1/plans", { slug: "runs5", name: "Five", allowance: { unit: "runs", limit: 5 } });
    await api("POST", "/v1/plans", { slug: "tokens", name: "Tokens", allowance: { unit: "tokens", limit: 150 } });
    await api("POST", "/v1/plans", { slug: "overage", name: "Overage", allowance: { unit: "runs", limit: 2 }, overage: true, overagePriceMicros: 250_000 });
    await api("POST", "/v1/plans", { slug: "tokmeter", name: "Token meter", allowance: { unit: "tokens", limit: 100 }, overage: true, overagePriceMicros: 1_234 });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  const start = (user: string) => api("POST", "/v1/runs", { user, model: "auto", prompt: "p", route: { prefer: ["app"] } });

  it("every sequence of starts, retries, reports, failures and bursts leaves sums equal to rows, no row twice, no allowance overshoot", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 14 }), async (actions) => {
        const user = `prop-${++users}`;
        let plan: keyof typeof PLANS = "runs3";
        // The model: runs counted in the current window, tokens and cost reported, runs handed back.
        const runIds: string[] = [];
        const reported = new Set<string>();
        let tokens = 0;
        let cost = 0;
        let overageRuns = 0;
        let tokenOverage = 0;
        const allowed = () => {
          const p = PLANS[plan];
          if (p.overage) return true;
          return p.unit === "runs" ? runIds.length < p.limit : tokens < p.limit;
        };
        const counted = (status: number, runId: string | null) => {
          if (status === 409) {
            expect(runId).toBeTruthy();
            if (!runIds.includes(runId!)) {
              if (plan === "overage" && runIds.length >= PLANS.overage.limit) overageRuns++;
              runIds.push(runId!);
            }
          } else expect(status).toBe(402);
        };

        for (const a of actions) {
          switch (a.kind) {
            case "start": {
              const expectRun = allowed();
              const r = await start(user);
              expect(r.status).toBe(expectRun ? 409 : 402);
              counted(r.status, r.headers.get("service-run-id"));
              break;
            }
            case "chat": {
              // A request and its retries with one Idempotency-Key are one run.
              const body = { model: "auto", user, messages: [{ role: "user", content: `q${runIds.length}-${actions.indexOf(a)}` }] };
              const key = randomUUID();
              const retry = apiClient(server, server.dev.appKey, () => ({ "idempotency-key": key }));
              const expectRun = allowed();
              const ids = new Set<string | null>();
              for (let i = 0; i <= a.retries; i++) {
                const r = await retry("POST", "/v1/chat/completions", body);
                expect(r.status).toBe(expectRun ? 409 : 402);
                ids.add(r.headers.get("service-run-id"));
                counted(r.status, r.headers.get("service-run-id"));
              }
              expect(ids.size).toBe(1);
              break;
            }
            case "report": {
              if (runIds.length === 0) break;
              const runId = runIds[a.which % runIds.length];
              const first = !reported.has(runId);
              for (let i = 0; i < (a.twice ? 2 : 1); i++) {
                const r = await api("POST", `/v1/runs/${runId}/usage`, { inputTokens: a.input, outputTokens: a.output, costMicros: a.cost });
                if (first && i === 0) {
                  expect(r.status).toBe(200);
                  reported.add(runId);
                  // On the metered tokens plan the tokens past its allowance are priced per 1,000, rounded down.
                  const t = a.input + a.output;
                  const over = plan === "tokmeter" ? Math.max(0, Math.min(t, tokens + t - PLANS.tokmeter.limit)) : 0;
                  tokenOverage += Math.floor((over * PLANS.tokmeter.price) / 1000);
                  expect(r.body.amountMicros).toBe(a.cost + Math.floor((over * PLANS.tokmeter.price) / 1000));
                  tokens += t;
                  cost += a.cost;
                } else expect(r.body.error.code).toBe("usage_already_reported");
              }
              break;
            }
            case "reportUnknown": {
              const r = await api("POST", `/v1/runs/run_nope${users}/usage`, { inputTokens: 1, outputTokens: 1 });
              expect(r.status).toBe(404);
              break;
            }
            case "burst": {
              // Concurrent starts of one user: the allowance decides under the user's lock.
              const p = PLANS[plan];
              const room = p.overage ? a.n : p.unit === "runs" ? Math.max(0, Math.min(a.n, p.limit - runIds.length)) : tokens < p.limit ? a.n : 0;
              const results = await Promise.all(Array.from({ length: a.n }, () => start(user)));
              expect(results.filter((r) => r.status === 409)).toHaveLength(room);
              for (const r of results) counted(r.status, r.headers.get("service-run-id"));
              break;
            }
            case "plan": {
              const r = await api("PUT", `/v1/users/${user}/plan`, { plan: a.plan });
              expect(r.status).toBe(200);
              plan = a.plan;
              break;
            }
          }
        }

        // Reads equal the sums of the rows.
        const rows: { kind: string; runId: string; inputTokens: number; outputTokens: number; amountMicros: number }[] = [];
        let cursor: string | null = null;
        do {
          const page: { body: { data: typeof rows; nextCursor: string | null } } = await api("GET", `/v1/usage?user=${user}&limit=7${cursor ? `&cursor=${cursor}` : ""}`);
          rows.push(...page.body.data);
          cursor = page.body.nextCursor;
        } while (cursor);
        const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((s, r) => s + f(r), 0);
        const runRows = rows.filter((r) => r.kind === "run");
        expect(runRows.map((r) => r.runId).sort()).toEqual([...runIds].sort());
        expect(rows.filter((r) => r.kind === "app_usage").map((r) => r.runId).sort()).toEqual([...reported].sort());
        expect(sum((r) => r.inputTokens + r.outputTokens)).toBe(tokens);
        expect(sum((r) => r.amountMicros)).toBe(cost + overageRuns * PLANS.overage.price + tokenOverage);
        if (runIds.length > 0) {
          const view = (await api("GET", `/v1/users/${user}`)).body;
          expect(view.usage).toMatchObject({ runs: runRows.length, amountMicros: sum((r) => r.amountMicros) });
          expect(view.usage.inputTokens + view.usage.outputTokens).toBe(tokens);
          expect(view.allowance.used).toBe(view.allowance.unit === "runs" ? runRows.length : tokens);
        }
        // A stopping runs allowance is never passed: at most the largest stopping limit the user was on.
        if (!actions.some((a) => a.kind === "plan")) expect(runIds.length).toBeLessThanOrEqual(3);
      }),
      { numRuns: Number(process.env.SVC_PROPERTY_RUNS ?? 25) },
    );
    const dup = await server.db.query<{ n: string | number }>(`SELECT count(*) - count(DISTINCT unique_key) AS n FROM usage_rows`);
    expect(Number(dup[0].n)).toBe(0);
  }, 240_000);
});
