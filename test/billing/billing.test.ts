import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";
import { tableCounts } from "../helpers/snapshot.js";
import { nested, startStripeStandIn, type StripeStandIn } from "../helpers/stripe-standin.js";
import { ACCOUNT, checkout, connectAccount, deliver, mintSession, portal, startConnect, stripeEnv, unixNow, writePlans } from "../helpers/billing.js";

/**
 * The app's Stripe account, what the components read (GET /v1/billing),
 * checkout (POST /v1/billing/checkout) and the customer portal (POST
 * /v1/billing/portal) through the real `stripe` library, against a stand-in
 * speaking Stripe's wire format, on each database.
 */
onEachDatabase("billing: account, overview and checkout on $db.name", (db) => {
  let server: TestServer;
  let drop: () => Promise<void>;
  let stripe: StripeStandIn;

  beforeAll(async () => {
    const made = await db.create({ migrated: true });
    drop = made.drop;
    stripe = await startStripeStandIn();
    server = await startTestServer(made.target, stripeEnv(stripe));
    await writePlans(server);
  });
  afterAll(async () => {
    await server?.close();
    await stripe?.close();
    await drop?.();
  });

  const getAccount = async () => {
    const res = await server.fetch("/v1/billing/account", { headers: bearer(server.dev.appKey) });
    expect(res.status).toBe(200);
    return res.json();
  };

  it("checkout waits for the app's Stripe account (409 billing_not_connected, nothing sent to Stripe); the account is then connected per environment", async () => {
    const { session } = await mintSession(server, "alice");
    const overview = await (await server.fetch("/v1/billing", { headers: bearer(session) })).json();
    expect(overview.checkoutAvailable).toBe(false);
    await expectError(await checkout(server, session, { plan: "pro" }), 409, "billing_not_connected");
    expect(stripe.checkouts).toHaveLength(0);
    // The portal too, for a user with a Stripe subscription (written as a row: no event names an app whose account is not connected).
    const zoe = await mintSession(server, "zoe");
    const zoeUser = await server.db.prisma.endUser.findFirstOrThrow({ where: { externalId: "zoe" } });
    const pro = await server.db.prisma.plan.findFirstOrThrow({ where: { appId: server.dev.appId, environment: "test", slug: "pro" } });
    await server.db.prisma.subscription.create({
      data: { id: "sub_row_zoe", appId: server.dev.appId, environment: "test", endUserId: zoeUser.id, planId: pro.id, status: "active", source: "stripe", stripeCustomerId: "cus_zoe", stripeSubscriptionId: "sub_zoe", currentPeriodStart: server.clock.now() },
    });
    await expectError(await portal(server, zoe.session), 409, "billing_not_connected");
    expect(stripe.portals).toHaveLength(0);

    expect(await getAccount()).toMatchObject({ environment: "test", stripeAccountId: null, connectedVia: null, webhookUrl: `${server.url}/v1/stripe/webhook` });
    // Through Stripe Connect only (test/billing/billing-connect.test.ts has the rest).
    const first = await connectAccount(server, stripe, { account: "acct_first" });
    expect(first.status, await first.clone().text()).toBe(200);
    expect((await first.json()).account).toMatchObject({ environment: "test", stripeAccountId: "acct_first", connectedVia: "oauth", webhookUrl: `${server.url}/v1/stripe/webhook` });
    expect((await connectAccount(server, stripe)).status).toBe(200); // replaced, not added
    expect(await getAccount()).toMatchObject({ stripeAccountId: ACCOUNT, chargesEnabled: true });
    expect(await server.db.prisma.billingAccount.count()).toBe(1);
  });

  it("creates the Checkout Session in the connected account, tagged with the user and the plan, with the plan's trial", async () => {
    const { session } = await mintSession(server, "alice");
    const res = await checkout(server, session, { plan: "pro" });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = await res.json();
    expect(body.id).toMatch(/^cs_test_/);
    expect(body.url).toBe(`${stripe.url}/pay/${body.id}`);

    const sent = stripe.checkouts.at(-1)!;
    expect(sent.stripeAccount).toBe(ACCOUNT);
    const tags = { svc_app: server.dev.appId, svc_environment: "test", svc_user: "alice", svc_plan: "pro" };
    expect(sent.fields).toMatchObject({
      mode: "subscription",
      "line_items[0][price]": "price_pro",
      "line_items[0][quantity]": "1",
      client_reference_id: "alice",
      "subscription_data[trial_period_days]": "14",
      success_url: `${server.url}/billing?checkout=success`,
      cancel_url: `${server.url}/billing?checkout=cancel`,
    });
    expect(nested(sent.fields, "metadata")).toEqual(tags);
    expect(nested(sent.fields, "subscription_data[metadata]")).toEqual(tags);

    // No trial on a plan without one; the app's own return page, told how it went.
    const team = await checkout(server, session, { plan: "team", returnUrl: "https://app.example/settings/billing?tab=plan" });
    expect(team.status).toBe(200);
    const fields = stripe.checkouts.at(-1)!.fields;
    expect(fields["subscription_data[trial_period_days]"]).toBeUndefined();
    expect(fields.success_url).toBe("https://app.example/settings/billing?tab=plan&checkout=success");
    expect(fields.cancel_url).toBe("https://app.example/settings/billing?tab=plan&checkout=cancel");
  });

  it("refuses what cannot be bought, in the envelope, and asks Stripe nothing", async () => {
    const { session } = await mintSession(server, "bob");
    const before = stripe.checkouts.length;
    const counts = await tableCounts(server.db);
    await expectError(await checkout(server, session, { plan: "nope" }), 404, "not_found");
    expect((await expectError(await checkout(server, session, { plan: "legacy" }), 409, "plan_unavailable")).error.message).toMatch(/no longer sold/);
    expect((await expectError(await checkout(server, session, { plan: "manual" }), 409, "plan_unavailable")).error.message).toMatch(/not sold through checkout/);
    await expectError(await checkout(server, session, { plan: "Pro!" }), 400, "invalid_request");
    await expectError(await checkout(server, session, { plan: "pro", returnUrl: "javascript:alert(1)" }), 400, "invalid_request");
    await expectError(await checkout(server, session, { plan: "pro", returnUrl: "ftp://app.example/x" }), 400, "invalid_request");
    expect(stripe.checkouts.length).toBe(before);
    expect(await tableCounts(server.db)).toEqual(counts);
  });

  it("Stripe's refusal is a 409 saying why; Stripe unreachable is a 503", async () => {
    const { session } = await mintSession(server, "carol");
    stripe.failNext(400, { type: "invalid_request_error", code: "resource_missing", message: "No such price: 'price_pro'" });
    const refused = await expectError(await checkout(server, session, { plan: "pro" }), 409, "plan_unavailable");
    expect(refused.error.message).toContain("No such price");
    stripe.failNext(500, { type: "api_error", message: "boom" }, 2);
    await expectError(await checkout(server, session, { plan: "pro" }), 503, "service_unavailable");
    expect(server.logs.join("")).not.toContain("sk_test_standin");
  });

  it("the overview lists the plans on sale and the default, the user's plan, allowance and usage", async () => {
    const { session } = await mintSession(server, "dave");
    const res = await server.fetch("/v1/billing", { headers: bearer(session) });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = await res.json();
    expect(body.user).toBe("dave");
    expect(body.checkoutAvailable).toBe(true);
    expect(body.plans.map((p: { slug: string }) => p.slug).sort()).toEqual(["free", "manual", "pro", "team"]);
    expect(body.current.plan.slug).toBe("free");
    expect(body.current.subscription).toBeNull();
    expect(body.current.allowance).toMatchObject({ limit: 0, used: 0, reached: true });
    expect(body.current.usage).toMatchObject({ runs: 0, amountMicros: 0 });
  });

  it("the customer portal opens in the connected account for the customer of the user's subscription; no second checkout, of any plan, while it lives; after its deletion checkout works again", async () => {
    const { session } = await mintSession(server, "erin");
    const before = { checkouts: stripe.checkouts.length, portals: stripe.portals.length };
    expect((await expectError(await portal(server, session), 409, "no_subscription")).error.message).toMatch(/no Stripe subscription/);
    expect(stripe.portals.length).toBe(before.portals);

    const t = unixNow(server);
    const sub = { id: "sub_erin", object: "subscription", customer: "cus_erin", status: "active", metadata: { svc_app: server.dev.appId, svc_environment: "test", svc_user: "erin", svc_plan: "team" } };
    expect((await deliver(server, "customer.subscription.created", sub, { created: t })).status).toBe(200);
    const overview = await (await server.fetch("/v1/billing", { headers: bearer(session) })).json();
    expect(overview.current.subscription).toMatchObject({ source: "stripe", status: "active" });
    expect(overview.portalAvailable).toBe(true);

    // The plan held, and any other: the portal is where plans change.
    for (const plan of ["team", "pro"]) {
      const refused = await expectError(await checkout(server, session, { plan }), 409, "already_subscribed");
      expect(refused.error.message).toMatch(/already subscribed to Team <b>&\. Change plans in the customer portal \(POST \/v1\/billing\/portal\)/);
    }
    expect(stripe.checkouts.length).toBe(before.checkouts);

    const res = await portal(server, session);
    expect(res.status, await res.clone().text()).toBe(200);
    const body = await res.json();
    const sent = stripe.portals.at(-1)!;
    expect(body).toEqual({ url: `${stripe.url}/portal/${sent.session.id}` });
    expect(sent.stripeAccount).toBe(ACCOUNT);
    expect(sent.fields).toEqual({ customer: "cus_erin", return_url: `${server.url}/billing?portal=return` });
    // The app's own return page, told where the browser comes from; only http(s).
    expect((await portal(server, session, { returnUrl: "https://app.example/settings/billing?tab=plan" })).status).toBe(200);
    expect(stripe.portals.at(-1)!.fields.return_url).toBe("https://app.example/settings/billing?tab=plan&portal=return");
    await expectError(await portal(server, session, { returnUrl: "javascript:alert(1)" }), 400, "invalid_request");
    expect(stripe.portals.length).toBe(before.portals + 2);

    // Stripe refusing (no portal configured in the app's account) is a 409 saying why; unreachable, a 503.
    stripe.failNext(400, { type: "invalid_request_error", message: "No configuration provided and your test mode default configuration has not been created." });
    expect((await expectError(await portal(server, session), 409, "portal_unavailable")).error.message).toContain("No configuration provided");
    stripe.failNext(500, { type: "api_error", message: "boom" }, 2);
    await expectError(await portal(server, session), 503, "service_unavailable");

    // A failed renewal no longer entitles, but the card is fixed in the portal.
    expect((await deliver(server, "customer.subscription.updated", { ...sub, status: "past_due" }, { created: t + 1 })).status).toBe(200);
    expect((await portal(server, session)).status).toBe(200);
    expect(stripe.portals.at(-1)!.fields.customer).toBe("cus_erin");
    const unpaid = await (await server.fetch("/v1/billing", { headers: bearer(session) })).json();
    expect(unpaid).toMatchObject({ portalAvailable: true, current: { subscription: null } });
    // ...and no second subscription meanwhile: the payment is fixed first.
    expect((await expectError(await checkout(server, session, { plan: "pro" }), 409, "already_subscribed")).error.message).toMatch(/payment .* failed: fix it in the customer portal/);
    expect(stripe.checkouts.length).toBe(before.checkouts);

    // Cancelled in the portal: Stripe's event ends it, and checkout is open again.
    expect((await deliver(server, "customer.subscription.deleted", { ...sub, status: "canceled" }, { created: t + 2 })).status).toBe(200);
    await expectError(await portal(server, session), 409, "no_subscription");
    expect((await (await server.fetch("/v1/billing", { headers: bearer(session) })).json()).portalAvailable).toBe(false);
    expect((await checkout(server, session, { plan: "pro" })).status).toBe(200);
    expect(stripe.checkouts.length).toBe(before.checkouts + 1);
  });

  it("answers CORS for the browser routes only: any origin, the bearer header, no cookies", async () => {
    const preflight = await server.fetch("/v1/billing/checkout", {
      method: "OPTIONS",
      headers: { origin: "https://app.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get("access-control-allow-origin")).toBe("*");
    expect(preflight.headers.get("access-control-allow-methods")).toBe("POST");
    expect(preflight.headers.get("access-control-allow-headers")?.toLowerCase()).toBe("authorization, content-type");
    expect(preflight.headers.get("access-control-allow-credentials")).toBeNull();
    const portalPreflight = await server.fetch("/v1/billing/portal", { method: "OPTIONS", headers: { origin: "https://app.example", "access-control-request-method": "POST" } });
    expect(portalPreflight.status).toBe(204);
    expect(portalPreflight.headers.get("access-control-allow-origin")).toBe("*");

    const { session } = await mintSession(server, "frank");
    const read = await server.fetch("/v1/machines", { headers: { ...bearer(session), origin: "https://app.example" } });
    expect(read.status).toBe(200);
    expect(read.headers.get("access-control-allow-origin")).toBe("*");
    expect(read.headers.get("access-control-expose-headers")).toContain("Request-Id");
    // An error too, so the component can read its message.
    const refused = await server.fetch("/v1/billing", { headers: { origin: "https://app.example" } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get("access-control-allow-origin")).toBe("*");

    for (const path of ["/v1/plans", "/v1/runs", "/v1/billing/account", "/v1/stripe/webhook"]) {
      const other = await server.fetch(path, { method: "OPTIONS", headers: { origin: "https://app.example", "access-control-request-method": "POST" } });
      expect(other.headers.get("access-control-allow-origin"), path).toBeNull();
    }
  });
});

describe("billing without Stripe configured", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
    await writePlans(server);
    // Connected while Stripe was configured (nothing can be connected without it); the operator has removed the key since.
    await server.db.prisma.billingAccount.create({ data: { appId: server.dev.appId, environment: "test", stripeAccountId: ACCOUNT, connectedVia: "oauth", chargesEnabled: true } });
  });
  afterAll(async () => server?.close());

  it("checkout, the portal and connecting answer 501 not_configured naming the setting (not a retryable 503); every webhook is refused (400) saying no secret is configured", async () => {
    for (const mode of ["oauth", "create"]) {
      expect((await expectError(await startConnect(server, { mode }), 501, "not_configured")).error.message).toMatch(/not configured Stripe \(STRIPE_SECRET_KEY\); retrying will not help/);
    }
    const { session } = await mintSession(server, "alice");
    const res = await checkout(server, session, { plan: "pro" });
    expect((await expectError(res, 501, "not_configured")).error.message).toMatch(/not configured Stripe \(STRIPE_SECRET_KEY\); retrying will not help/);
    const overview = await (await server.fetch("/v1/billing", { headers: bearer(session) })).json();
    expect(overview.checkoutAvailable).toBe(false);
    // The portal: the user's subscription is checked first (409), then the key (503).
    await expectError(await portal(server, session), 409, "no_subscription");
    const alice = await server.db.prisma.endUser.findFirstOrThrow({ where: { externalId: "alice" } });
    await server.db.prisma.subscription.create({
      data: { id: "sub_row_alice", appId: server.dev.appId, environment: "test", endUserId: alice.id, planId: "plan_pro", status: "active", source: "stripe", stripeCustomerId: "cus_alice", stripeSubscriptionId: "sub_alice", currentPeriodStart: server.clock.now() },
    });
    expect((await expectError(await portal(server, session), 501, "not_configured")).error.message).toMatch(/not configured Stripe \(STRIPE_SECRET_KEY\); retrying will not help/);

    const before = await tableCounts(server.db);
    const hook = await deliver(server, "customer.subscription.created", { id: "sub_x", status: "active" });
    expect(hook.status).toBe(400);
    expect(hook.body.error?.code).toBe("invalid_signature");
    expect(JSON.stringify(hook.body)).toMatch(/no Stripe webhook signing secret is configured/i);
    expect(await tableCounts(server.db)).toEqual(before);
  });
});
