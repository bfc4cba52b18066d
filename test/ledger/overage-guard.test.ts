import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { overageMicros } from "../../server/ledger/functions.js";
import { periodOf } from "../../server/ledger/metering.js";

/**
 * `svc_overage_micros` prices a model turn's tokens past a tokens plan's allowance. It first
 * looks whether any plan of the app prices tokens past an allowance, and answers 0 at once
 * when none does (most apps: every turn's ledger row asks). That look must not skip a user
 * whose plan does: an archived plan still held by a subscription included.
 */
onEachDatabase("token overage priced only where a plan of the app prices it, on $db.name", (db) => {
  let server: TestServer;
  const tenant = () => ({ appId: server.dev.appId, environment: "test" as const });
  const period = periodOf(new Date());

  /** `tokens` used already this period by the user, as a model turn's ledger row records them. */
  const used = (endUserId: string, tokens: number, key: string) =>
    server.db.query(
      `INSERT INTO usage_rows (app_id, environment, end_user_id, cost_class, kind, input_tokens, output_tokens, period, unique_key)
       VALUES ($1, 'test', $2, 'user_hardware', 'tokens', $3, 0, $4, $5)`,
      [server.dev.appId, endUserId, tokens, period, key],
    );
  const price = (endUserId: string, tokens: number) => overageMicros(server.db, { ...tenant(), endUserId, period, tokens });

  beforeAll(async () => {
    server = await startTestServerOn(db);
  }, 60_000);

  afterAll(async () => {
    await server?.close();
  });

  it("answers 0 in an app without such a plan, and prices a subscriber of an archived one; another plan's user pays nothing", async () => {
    const metered = await ensureEndUser(server.db, tenant(), "metered");
    const other = await ensureEndUser(server.db, tenant(), "other");
    await used(metered, 80, "u1");
    await used(other, 80, "u2");
    // A runs plan only (the default): nothing to price for anyone.
    await server.db.query(
      `INSERT INTO plans (id, app_id, environment, slug, name, allowance_unit, allowance, is_default) VALUES ('plan_free', $1, 'test', 'free', 'Free', 'runs', 3, true)`,
      [server.dev.appId],
    );
    expect(await price(metered, 50)).toBe(0n);

    // A tokens plan with overage, archived, still held by the metered user's subscription: 80 + 50 - 100 = 30 tokens past, at 2,000 µ$ per 1,000.
    await server.db.query(
      `INSERT INTO plans (id, app_id, environment, slug, name, allowance_unit, allowance, overage, overage_price_micros, archived_at)
       VALUES ('plan_tok', $1, 'test', 'tok', 'Tokens', 'tokens', 100, true, 2000, now())`,
      [server.dev.appId],
    );
    await server.db.query(
      `INSERT INTO subscriptions (id, app_id, environment, end_user_id, plan_id, status, source, current_period_start) VALUES ('sub_1', $1, 'test', $2, 'plan_tok', 'active', 'app', now())`,
      [server.dev.appId, metered],
    );
    expect(await price(metered, 50)).toBe(60n);
    // Under the allowance: nothing past it yet.
    expect(await price(metered, 20)).toBe(0n);
    // The other user is on the default runs plan: the app has a priced plan, theirs prices nothing.
    expect(await price(other, 50)).toBe(0n);
  });
});
