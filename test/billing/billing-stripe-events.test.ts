import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { tableCounts } from "../helpers/snapshot.js";
import { signedDelivery, stripeEvent, completedCheckout, startStripeStandIn, subscriptionObject, type StripeStandIn } from "../helpers/stripe-standin.js";
import { ACCOUNT, connectAccount, deliver, getUser, startHandback, stripeEnv, unixNow, WEBHOOK_SECRET, writePlans } from "../helpers/billing.js";

/**
 * Stripe's signed webhooks set the entitlement: verified over the raw body,
 * each event applied once (even two deliveries at the same moment), in any
 * order, and the allowance the run start checks follows at once. Both databases.
 */
onEachDatabase("billing: Stripe's webhooks on $db.name", (db) => {
  let server: TestServer;
  let stripe: StripeStandIn;

  beforeAll(async () => {
    stripe = await startStripeStandIn();
    server = await startTestServerOn(db, stripeEnv(stripe));
    await writePlans(server);
    expect((await connectAccount(server, stripe)).status).toBe(200);
  });
  afterAll(async () => {
    await server?.close();
    await stripe?.close();
  });

  const subRow = (id: string) => server.db.prisma.subscription.findUnique({ where: { stripeSubscriptionId: id }, include: { plan: true, endUser: true } });
  const meta = (user: string, plan: string) => ({ svc_app: server.dev.appId, svc_environment: "test", svc_user: user, svc_plan: plan });
  const post = (body: string, headers: Record<string, string>) => server.fetch("/v1/stripe/webhook", { method: "POST", headers, body });

  it("refuses a missing, wrong, tampered or stale signature with 400 invalid_signature, writing nothing", async () => {
    const now = unixNow(server);
    const event = stripeEvent("customer.subscription.created", subscriptionObject({ id: "sub_forged", customer: "cus_x", status: "active", price: "price_pro", periodStart: now, periodEnd: now + 86400 * 30, metadata: meta("mallory", "pro") }), { created: now, account: "acct_1AppConnected" });
    const good = signedDelivery(event, WEBHOOK_SECRET, now);
    const before = await tableCounts(server.db);
    const attempts = [
      post(good.body, { "content-type": "application/json" }),
      post(good.body, signedDelivery(event, "whsec_someoneelse000", now).headers),
      post(good.body.replace('"active"', '"trialing"'), good.headers),
      post(good.body, signedDelivery(event, WEBHOOK_SECRET, now - 3600).headers),
      post(good.body, { ...good.headers, "stripe-signature": "t=1,v1=deadbeef" }),
    ];
    for (const res of await Promise.all(attempts)) {
      expect(res.status).toBe(400);
      expect((await res.json()).error.code).toBe("invalid_signature");
    }
    expect(await tableCounts(server.db)).toEqual(before);
    expect(server.logs.join("")).not.toContain(WEBHOOK_SECRET);
  });

  it("applies an event once: a repeat, and deliveries racing each other, answer duplicate and change nothing", async () => {
    const now = unixNow(server);
    const object = subscriptionObject({ id: "sub_dupe", customer: "cus_dupe", status: "active", price: "price_pro", periodStart: now, periodEnd: now + 86400 * 30, metadata: meta("dana", "pro") });
    const first = await deliver(server, "customer.subscription.created", object, { created: now });
    expect(first).toMatchObject({ status: 200, body: { received: true, duplicate: false } });
    const again = await deliver(server, "customer.subscription.created", object, { created: now, id: first.eventId });
    expect(again).toMatchObject({ status: 200, body: { received: true, duplicate: true } });

    const racing = await Promise.all(Array.from({ length: 6 }, () => deliver(server, "customer.subscription.updated", { ...object, status: "past_due" }, { created: now + 5, id: "evt_racing_once" })));
    expect(racing.map((r) => r.status)).toEqual(Array(6).fill(200));
    expect(racing.filter((r) => r.body.duplicate === false)).toHaveLength(1);
    expect(await server.db.prisma.stripeEvent.count({ where: { id: { in: [first.eventId, "evt_racing_once"] } } })).toBe(2);
    expect(await server.db.prisma.subscription.count({ where: { stripeSubscriptionId: "sub_dupe" } })).toBe(1);
    expect((await subRow("sub_dupe"))!.status).toBe("past_due");
  });

  it("takes events in any order: a subscription event before its checkout, an older update after a newer one, an update after the deletion", async () => {
    const t = unixNow(server);
    const sub = (status: string, extra: Partial<Parameters<typeof subscriptionObject>[0]> = {}) =>
      subscriptionObject({ id: "sub_order", customer: "cus_order", status, price: "price_team", periodStart: t, periodEnd: t + 86400 * 30, metadata: meta("olga", "team"), ...extra });

    // The subscription's update arrives first: the row is made from its metadata.
    expect((await deliver(server, "customer.subscription.updated", sub("active"), { created: t + 10 })).status).toBe(200);
    let row = (await subRow("sub_order"))!;
    expect(row).toMatchObject({ status: "active", source: "stripe", stripeCustomerId: "cus_order", stripeCheckoutSessionId: null });
    expect(row.plan.slug).toBe("team");
    expect(row.endUser.externalId).toBe("olga");
    expect(row.currentPeriodEnd?.getTime()).toBe((t + 86400 * 30) * 1000);

    // Its checkout then: the session id is filled in, the status is not regressed.
    const checkout = completedCheckout({ session: "cs_test_order", subscription: "sub_order", customer: "cus_order", user: "olga", plan: "team", appId: server.dev.appId, paid: false });
    expect((await deliver(server, "checkout.session.completed", checkout, { created: t })).status).toBe(200);
    row = (await subRow("sub_order"))!;
    expect(row).toMatchObject({ status: "active", stripeCheckoutSessionId: "cs_test_order" });

    // A newer update, then an older one: the newer stands.
    await deliver(server, "customer.subscription.updated", sub("past_due"), { created: t + 30 });
    await deliver(server, "customer.subscription.updated", sub("active"), { created: t + 20 });
    expect((await subRow("sub_order"))!.status).toBe("past_due");

    // Deleted; a late update (even one stamped the same second) never brings it back.
    await deliver(server, "customer.subscription.deleted", sub("canceled", { endedAt: t + 40 }), { created: t + 40 });
    await deliver(server, "customer.subscription.updated", sub("active"), { created: t + 40 });
    row = (await subRow("sub_order"))!;
    expect(row.status).toBe("canceled");
    expect(row.canceledAt?.getTime()).toBe((t + 40) * 1000);
    expect(await server.db.prisma.subscription.count({ where: { endUser: { externalId: "olga" } } })).toBe(1);
  });

  it("a paid subscription lifts the allowance at once (402, then a counted handback), a deletion puts the user back on the default plan; plan.changed is recorded", async () => {
    await server.db.query(
      `INSERT INTO webhook_endpoints (id, app_id, environment, url, secret, event_types) VALUES ('we_billing', $1, 'test', 'http://127.0.0.1:9/hooks', 'unused', ARRAY['plan.changed'])`,
      [server.dev.appId],
    );
    expect(await startHandback(server, "bob")).toEqual({ status: 402, code: "allowance_exhausted" });
    expect((await getUser(server, "bob")).plan?.slug).toBe("free");

    const t = unixNow(server);
    const checkout = completedCheckout({ session: "cs_test_bob", subscription: "sub_bob", customer: "cus_bob", user: "bob", plan: "pro", appId: server.dev.appId, paid: false });
    const completed = await deliver(server, "checkout.session.completed", checkout, { created: t });
    expect(completed.status).toBe(200);
    // Trialing from the checkout alone (a 14-day trial needed no payment).
    expect((await subRow("sub_bob"))!.status).toBe("trialing");
    const created = await deliver(server, "customer.subscription.created",
      subscriptionObject({ id: "sub_bob", customer: "cus_bob", status: "active", price: "price_pro", periodStart: t, periodEnd: t + 86400 * 30, metadata: meta("bob", "pro") }), { created: t + 1 });
    expect(created.status).toBe(200);

    expect(await startHandback(server, "bob")).toEqual({ status: 409, code: "serve_in_app" });
    const bob = await getUser(server, "bob");
    expect(bob.plan?.slug).toBe("pro");
    expect(bob.subscription).toMatchObject({ status: "active", source: "stripe" });
    expect(bob.allowance).toMatchObject({ limit: 100, used: 1 });

    const deliveries = await server.db.prisma.webhookDelivery.findMany({ where: { endpointId: "we_billing" }, orderBy: { createdAt: "asc" } });
    const byKey = Object.fromEntries(deliveries.map((d) => [d.eventKey, d]));
    expect(byKey[`plan.changed:${completed.eventId}`]?.payload).toMatchObject({ type: "plan.changed", data: { user: "bob", plan: "pro", previousPlan: "free", status: "trialing", source: "stripe" } });
    expect(byKey[`plan.changed:${created.eventId}`]?.payload).toMatchObject({ data: { user: "bob", plan: "pro", previousPlan: "pro", status: "active" } });

    const deleted = await deliver(server, "customer.subscription.deleted",
      subscriptionObject({ id: "sub_bob", customer: "cus_bob", status: "canceled", price: "price_pro", periodStart: t, periodEnd: t + 86400 * 30, metadata: meta("bob", "pro"), endedAt: t + 2 }), { created: t + 2 });
    expect(deleted.status).toBe(200);
    expect(await startHandback(server, "bob")).toEqual({ status: 402, code: "allowance_exhausted" });
    expect((await getUser(server, "bob")).plan?.slug).toBe("free");
    const last = await server.db.prisma.webhookDelivery.findFirst({ where: { eventKey: `plan.changed:${deleted.eventId}` } });
    expect(last?.payload).toMatchObject({ data: { user: "bob", plan: "free", previousPlan: "pro", status: "canceled" } });
  });

  it("finds the plan by its Stripe price, before the metadata (a change in the customer portal moves the price only)", async () => {
    const t = unixNow(server);
    const object = subscriptionObject({ id: "sub_byprice", customer: "cus_p", status: "trialing", price: "price_team", periodStart: t, periodEnd: t + 86400 * 30, trialEnd: t + 86400 * 14, metadata: { ...meta("pat", "team"), svc_plan: "" } });
    expect((await deliver(server, "customer.subscription.created", object)).status).toBe(200);
    const row = (await subRow("sub_byprice"))!;
    expect(row.plan.slug).toBe("team");
    expect(row.trialEndsAt?.getTime()).toBe((t + 86400 * 14) * 1000);
    expect((await getUser(server, "pat")).subscription).toMatchObject({ status: "trialing", trialEndsAt: new Date((t + 86400 * 14) * 1000).toISOString() });
    // The user switches to Pro in the portal: the price changes, the checkout's metadata still says team.
    const switched = subscriptionObject({ id: "sub_byprice", customer: "cus_p", status: "active", price: "price_pro", periodStart: t, periodEnd: t + 86400 * 30, metadata: meta("pat", "team") });
    expect((await deliver(server, "customer.subscription.updated", switched, { created: t + 5 })).status).toBe(200);
    expect((await subRow("sub_byprice"))!.plan.slug).toBe("pro");
    expect((await getUser(server, "pat")).plan?.slug).toBe("pro");
  });

  it("an event's tenant is only the connected account it came from: metadata naming our app from another account changes nothing; an account is one app's", async () => {
    const subs = await server.db.prisma.subscription.count();
    const t = unixNow(server);
    const forged = subscriptionObject({ id: "sub_forged1", customer: "cus_m", status: "active", price: "price_pro", periodStart: t, periodEnd: t + 86400 * 30, metadata: meta("mallory", "pro") });
    const r = await deliver(server, "customer.subscription.created", forged, { account: "acct_neverConnected" });
    expect(r).toMatchObject({ status: 200, body: { received: true } });
    expect(await server.db.prisma.stripeEvent.findUnique({ where: { id: r.eventId } })).toBeNull();
    expect(await server.db.prisma.subscription.count()).toBe(subs);
    // A live-mode event from the test account is not the test environment's.
    const live = await deliver(server, "customer.subscription.created", { ...forged, id: "sub_forged_live", livemode: true }, { livemode: true });
    expect(live.status).toBe(200);
    expect(await server.db.prisma.subscription.count()).toBe(subs);
    // Another app cannot connect the account this one holds, even once its owner authorized it through OAuth.
    const other = await server.services.keys.createApp("Other app", "test");
    const taken = await connectAccount(server, stripe, { appKey: other.appKey });
    expect(taken.status).toBe(409);
    expect((await taken.json()).error.code).toBe("account_in_use");
  });

  it("acknowledges events it has nothing to do with: unknown types are recorded and change nothing; an unknown account without our metadata is not recorded", async () => {
    const subs = await server.db.prisma.subscription.count();
    const other = await deliver(server, "invoice.paid", { id: "in_1", object: "invoice", metadata: {} });
    expect(other).toMatchObject({ status: 200, body: { received: true, duplicate: false } });
    expect(await server.db.prisma.stripeEvent.findUnique({ where: { id: other.eventId } })).toMatchObject({ type: "invoice.paid", appId: server.dev.appId, environment: "test" });
    const stranger = await deliver(server, "customer.subscription.created", { id: "sub_stranger", object: "subscription", status: "active", metadata: {} }, { account: "acct_nobody" });
    expect(stranger).toMatchObject({ status: 200, body: { received: true } });
    expect(await server.db.prisma.stripeEvent.findUnique({ where: { id: stranger.eventId } })).toBeNull();
    // Metadata naming an app that does not exist is nobody's either.
    const forged = await deliver(server, "customer.subscription.created", { id: "sub_forged2", object: "subscription", status: "active", metadata: { svc_app: "app_nope", svc_environment: "test", svc_user: "x", svc_plan: "pro" } }, { account: null });
    expect(forged.status).toBe(200);
    expect(await server.db.prisma.subscription.count()).toBe(subs);
  });
});
