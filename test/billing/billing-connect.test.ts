import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";
import { tableCounts } from "../helpers/snapshot.js";
import { accountObject, STANDIN_CLIENT_ID, startStripeStandIn, subscriptionObject, type StripeStandIn } from "../helpers/stripe-standin.js";
import { checkout, connectAccount, deliver, follow, mintSession, startConnect, stripeEnv, unixNow } from "../helpers/billing.js";
import type { NewKeys } from "../../server/keys/keys.js";

/**
 * Attaching an app's Stripe account through Stripe Connect only, driven by the
 * real `stripe` library against the stand-in's API and Connect hosts, the
 * browser's part played by hand-followed redirects: OAuth for an existing
 * account (its `state` single-use, expiring, bound to the app and
 * environment), an account the platform creates and onboards through Account
 * Links, the bare id refused, one account per app, disconnecting, and the
 * account's own events. Both databases.
 */
onEachDatabase("billing: Stripe Connect on $db.name", (db) => {
  let server: TestServer;
  let stripe: StripeStandIn;
  let n = 0;

  beforeAll(async () => {
    stripe = await startStripeStandIn();
    server = await startTestServerOn(db, stripeEnv(stripe));
  });
  afterAll(async () => {
    await server?.close();
    await stripe?.close();
  });

  const newApp = (environment: "test" | "live" = "test") => server.services.keys.createApp(`App ${++n}`, environment);
  const account = async (app: Pick<NewKeys, "appKey">) => {
    const res = await server.fetch("/v1/billing/account", { headers: bearer(app.appKey) });
    expect(res.status, await res.clone().text()).toBe(200);
    return res.json();
  };
  const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");
  const stateOf = (url: string) => new URL(url).searchParams.get("state")!;

  it("OAuth: the owner authorizes on Stripe, the callback exchanges the code on the Connect host and attaches the verified account; checkout then runs in it", async () => {
    const app = await newApp();
    const start = await startConnect(server, { mode: "oauth", returnUrl: "https://app.example/settings?tab=billing" }, app.appKey);
    expect(start.status, await start.clone().text()).toBe(200);
    const body = await start.json();
    expect(body).toMatchObject({ mode: "oauth", stripeAccountId: null });
    expect(Date.parse(body.expiresAt) - server.clock.now().getTime()).toBe(600_000);
    const url = new URL(body.url);
    expect(`${url.origin}${url.pathname}`).toBe(`${stripe.connectUrl}/oauth/authorize`);
    expect(Object.fromEntries(url.searchParams)).toEqual({
      response_type: "code",
      client_id: STANDIN_CLIENT_ID,
      scope: "read_write",
      redirect_uri: `${server.url}/v1/billing/connect/callback`,
      state: expect.stringMatching(/^cst_[A-Za-z0-9_-]{43}$/),
    });
    // The state is stored only as its SHA-256, bound to the app and environment.
    const state = stateOf(body.url);
    const row = await server.db.prisma.billingConnectState.findUniqueOrThrow({ where: { id: sha256(state) } });
    expect(row).toMatchObject({ appId: app.appId, environment: "test", mode: "oauth", usedAt: null });
    expect(JSON.stringify(await server.db.prisma.billingConnectState.findMany())).not.toContain(state);

    stripe.signIn("acct_1OwnerOne");
    const authorize = await fetch(body.url, { redirect: "manual" });
    const callback = authorize.headers.get("location")!;
    expect(callback.startsWith(`${server.url}/v1/billing/connect/callback?`)).toBe(true);
    const done = await fetch(callback, { redirect: "manual" });
    expect(done.status, await done.clone().text()).toBe(302);
    expect(done.headers.get("location")).toBe("https://app.example/settings?tab=billing&stripe_connect=connected");
    expect(done.headers.get("referrer-policy")).toBe("no-referrer");
    expect(done.headers.get("cache-control")).toBe("no-store");
    const code = new URL(callback).searchParams.get("code")!;
    expect(stripe.tokenExchanges.at(-1)).toEqual({ fields: { grant_type: "authorization_code", code }, account: "acct_1OwnerOne" });

    expect(await account(app)).toMatchObject({
      environment: "test",
      stripeAccountId: "acct_1OwnerOne",
      connectedVia: "oauth",
      chargesEnabled: true,
      detailsSubmitted: true,
      payoutsEnabled: true,
      requirements: { currentlyDue: [], pastDue: [], disabledReason: null },
    });
    // Neither the state nor the code reaches a log line.
    expect(server.logs.join("")).not.toContain(state);
    expect(server.logs.join("")).not.toContain(code);

    // Checkout in the verified account.
    await server.db.prisma.plan.create({ data: { id: `plan_c${n}`, appId: app.appId, environment: "test", slug: "pro", name: "Pro", priceMicros: 1n, allowance: 1n, stripePriceId: "price_c" } });
    const { session } = (await (await server.fetch("/v1/end_users/session", { method: "POST", headers: { ...bearer(app.appKey), "content-type": "application/json" }, body: JSON.stringify({ user: "u1" }) })).json()) as { session: string };
    expect((await checkout(server, session, { plan: "pro" })).status).toBe(200);
    expect(stripe.checkouts.at(-1)!.stripeAccount).toBe("acct_1OwnerOne");
  });

  it("the state is single-use, expires after ten minutes, is needed, and attaches only to the app and environment that started the flow", async () => {
    const app = await newApp();
    const other = await newApp();
    const live = await server.services.keys.createKeys(app.appId, "live");

    // Replayed: the second use of the same callback URL is refused and changes nothing.
    stripe.signIn("acct_1OwnerTwo");
    const start = await (await startConnect(server, { mode: "oauth" }, app.appKey)).json();
    const callback = (await fetch(start.url, { redirect: "manual" })).headers.get("location")!;
    expect((await fetch(callback)).status).toBe(200);
    const before = await tableCounts(server.db);
    const replay = await expectError(await fetch(callback, { redirect: "manual" }), 400, "invalid_state");
    // One answer for a used, an expired and an unknown state: a spent state tells its holder nothing (no existence oracle).
    expect(replay.error.message).toMatch(/unknown, expired or already used/);
    expect(await tableCounts(server.db)).toEqual(before);

    // Expired: ten minutes later the state is refused, even with a fresh code and a returnUrl (no redirect on a bad state).
    stripe.signIn("acct_1OwnerThree");
    const late = await (await startConnect(server, { mode: "oauth", returnUrl: "https://app.example/back" }, other.appKey)).json();
    const lateCallback = (await fetch(late.url, { redirect: "manual" })).headers.get("location")!;
    server.clock.advance(601);
    expect((await expectError(await fetch(lateCallback, { redirect: "manual" }), 400, "invalid_state")).error.message).toBe(replay.error.message);
    expect(stripe.tokenExchanges.at(-1)!.account).toBe("acct_1OwnerTwo"); // the late code was never exchanged
    expect((await account(other)).stripeAccountId).toBeNull();

    // Unknown, forged or missing states.
    const forged = new URL(lateCallback);
    forged.searchParams.set("state", `cst_${"A".repeat(43)}`);
    expect((await expectError(await fetch(forged, { redirect: "manual" }), 400, "invalid_state")).error.message).toBe(replay.error.message);
    forged.searchParams.delete("state");
    await expectError(await fetch(forged, { redirect: "manual" }), 400, "invalid_state");

    // Another app's state attaches that app's account, never this one's; the test environment's flow leaves live alone.
    stripe.signIn("acct_1OwnerFour");
    expect((await connectAccount(server, stripe, { appKey: other.appKey, account: "acct_1OwnerFour" })).status).toBe(200);
    expect((await account(other)).stripeAccountId).toBe("acct_1OwnerFour");
    expect((await account(app)).stripeAccountId).toBe("acct_1OwnerTwo");
    expect(await account(live)).toMatchObject({ environment: "live", stripeAccountId: null });
    // The platform's key is a test key: the live environment cannot connect (its events would say livemode: false, the test environment's).
    for (const mode of ["oauth", "create"]) {
      expect((await expectError(await startConnect(server, { mode }, live.appKey), 503, "service_unavailable")).error.message).toMatch(/live environment .* test key/);
    }
  });

  it("the owner declining, and Stripe refusing the code, attach nothing and say why (JSON, or a redirect to the returnUrl)", async () => {
    const app = await newApp();
    const exchanges = stripe.tokenExchanges.length;
    const denied = await connectAccount(server, stripe, { appKey: app.appKey, account: "acct_1Decliner", answer: "deny" });
    expect((await expectError(denied, 400, "connect_denied")).error.message).toMatch(/declined/);
    const redirected = await connectAccount(server, stripe, { appKey: app.appKey, account: "acct_1Decliner", answer: "deny", returnUrl: "https://app.example/back" });
    expect(redirected.status).toBe(302);
    expect(redirected.headers.get("location")).toBe("https://app.example/back?stripe_connect=error&code=connect_denied");
    expect(stripe.tokenExchanges.length).toBe(exchanges);

    stripe.failNext(400, { error: "invalid_grant", error_description: "Authorization code expired: ac_x" }, 1, "/oauth/token");
    expect((await expectError(await connectAccount(server, stripe, { appKey: app.appKey, account: "acct_1Refused" }), 400, "connect_failed")).error.message).toContain("Authorization code expired");
    stripe.failNext(500, { error: "server_error", error_description: "boom" }, 2, "/oauth/token");
    await expectError(await connectAccount(server, stripe, { appKey: app.appKey, account: "acct_1Refused" }), 503, "service_unavailable");
    expect((await account(app)).stripeAccountId).toBeNull();

    // Bad starts.
    await expectError(await startConnect(server, { mode: "oauth", returnUrl: "javascript:alert(1)" }, app.appKey), 400, "invalid_request");
    await expectError(await startConnect(server, { mode: "steal" }, app.appKey), 400, "invalid_request");
    await expectError(await startConnect(server, {}, app.appKey), 400, "invalid_request");
    await expectError(await server.fetch("/v1/billing/connect", { method: "POST", headers: { "content-type": "application/json" }, body: '{"mode":"oauth"}' }), 401, "missing_credential");
  });

  it("a bare account id is refused (410 connect_required, pointing at Connect) and attaches nothing", async () => {
    const app = await newApp();
    const before = await tableCounts(server.db);
    for (const body of [{ stripeAccountId: "acct_1Someone" }, { stripeAccountId: 42 }, {}]) {
      const res = await server.fetch("/v1/billing/account", { method: "PUT", headers: { ...bearer(app.appKey), "content-type": "application/json" }, body: JSON.stringify(body) });
      expect((await expectError(res, 410, "connect_required")).error.message).toMatch(/POST \/v1\/billing\/connect/);
    }
    expect(await tableCounts(server.db)).toEqual(before);
    expect((await account(app)).stripeAccountId).toBeNull();
  });

  it("two apps cannot hold one account: the second must prove ownership through OAuth, and then gets 409 account_in_use; the first keeps it and its access is not revoked", async () => {
    const first = await newApp();
    const second = await newApp();
    expect((await connectAccount(server, stripe, { appKey: first.appKey, account: "acct_1Shared" })).status).toBe(200);
    const exchanges = stripe.tokenExchanges.length;
    const deauthorizations = stripe.deauthorizations.length;
    const taken = await connectAccount(server, stripe, { appKey: second.appKey, account: "acct_1Shared" });
    expect((await expectError(taken, 409, "account_in_use")).error.message).toMatch(/connected to another app/);
    // It was verified first (the code was exchanged), and the platform's access, which the first app relies on, was left alone.
    expect(stripe.tokenExchanges.slice(exchanges)).toEqual([{ fields: expect.objectContaining({ grant_type: "authorization_code" }), account: "acct_1Shared" }]);
    expect(stripe.deauthorizations.length).toBe(deauthorizations);
    expect((await account(first)).stripeAccountId).toBe("acct_1Shared");
    expect((await account(second)).stripeAccountId).toBeNull();
    const redirected = await connectAccount(server, stripe, { appKey: second.appKey, account: "acct_1Shared", returnUrl: "https://second.example/billing" });
    expect(redirected.headers.get("location")).toBe("https://second.example/billing?stripe_connect=error&code=account_in_use");

    // Two apps whose owners authorized the same account, their callbacks racing: one holds it, the other is refused.
    const racers = [await newApp(), await newApp()];
    const callbacks: string[] = [];
    for (const racer of racers) {
      stripe.signIn("acct_1Raced");
      const { url } = await (await startConnect(server, { mode: "oauth" }, racer.appKey)).json();
      callbacks.push((await fetch(url, { redirect: "manual" })).headers.get("location")!);
    }
    const raced = await Promise.all(callbacks.map((c) => fetch(c, { redirect: "manual" })));
    expect(raced.map((r) => r.status).sort()).toEqual([200, 409]);
    expect((await raced.find((r) => r.status === 409)!.json()).error.code).toBe("account_in_use");
    expect(await server.db.prisma.billingAccount.count({ where: { stripeAccountId: "acct_1Raced" } })).toBe(1);

    // An account attached by a bare id before Connect (`legacy`, never verified) gives way to a verified connection.
    const squatter = await newApp();
    await server.db.prisma.billingAccount.create({ data: { appId: squatter.appId, environment: "test", stripeAccountId: "acct_1Squatted", connectedVia: "legacy" } });
    expect((await account(squatter)).connectedVia).toBe("legacy");
    const owner = await newApp();
    expect((await connectAccount(server, stripe, { appKey: owner.appKey, account: "acct_1Squatted" })).status).toBe(200);
    expect(await account(owner)).toMatchObject({ stripeAccountId: "acct_1Squatted", connectedVia: "oauth" });
    expect((await account(squatter)).stripeAccountId).toBeNull();
  });

  it("create: the platform creates a Standard account for the app and onboards it through Account Links; checkout waits for charges; a refreshed link, a resumed onboarding, then connected", async () => {
    const app = await newApp();
    const start = await startConnect(server, { mode: "create", returnUrl: "https://app.example/stripe" }, app.appKey);
    expect(start.status, await start.clone().text()).toBe(200);
    const body = await start.json();
    const created = stripe.accountCreations.at(-1)!;
    expect(created).toEqual({ type: "standard", "metadata[svc_app]": app.appId, "metadata[svc_environment]": "test" });
    expect(body.stripeAccountId).toMatch(/^acct_/);
    expect(stripe.accounts.get(body.stripeAccountId)!.createdByPlatform).toBe(true);
    const link = stripe.accountLinks.at(-1)!;
    expect(body.url).toBe(link.link.url);
    expect(body.url.startsWith(`${stripe.connectUrl}/setup/s/`)).toBe(true);
    expect(link.fields).toMatchObject({ account: body.stripeAccountId, type: "account_onboarding" });
    expect(link.fields.return_url).toMatch(new RegExp(`^${server.url}/v1/billing/connect/callback\\?state=cst_[\\w-]+&link=return$`));
    expect(link.fields.refresh_url).toBe(link.fields.return_url.replace("link=return", "link=refresh"));

    // Attached at once, onboarding pending: checkout waits.
    expect(await account(app)).toMatchObject({
      stripeAccountId: body.stripeAccountId,
      connectedVia: "created",
      chargesEnabled: false,
      detailsSubmitted: false,
      requirements: { currentlyDue: expect.arrayContaining(["external_account"]), disabledReason: "requirements.past_due" },
    });
    await server.db.prisma.plan.create({ data: { id: `plan_c${n}`, appId: app.appId, environment: "test", slug: "pro", name: "Pro", priceMicros: 1n, allowance: 1n, stripePriceId: "price_c" } });
    const { session } = (await (await server.fetch("/v1/end_users/session", { method: "POST", headers: { ...bearer(app.appKey), "content-type": "application/json" }, body: JSON.stringify({ user: "u1" }) })).json()) as { session: string };
    const checkouts = stripe.checkouts.length;
    expect((await expectError(await checkout(server, session, { plan: "pro" }), 409, "billing_not_connected")).error.message).toMatch(/cannot take charges/);
    expect((await (await server.fetch("/v1/billing", { headers: bearer(session) })).json()).checkoutAvailable).toBe(false);
    expect(stripe.checkouts.length).toBe(checkouts);

    // The link expired: Stripe sends the browser to refresh_url, which makes a new link (and a new state) for the same account.
    const refreshed = await fetch(link.fields.refresh_url, { redirect: "manual" });
    expect(refreshed.status).toBe(302);
    expect(refreshed.headers.get("location")).toBe(stripe.accountLinks.at(-1)!.link.url);
    expect(stripe.accountLinks.at(-1)!.fields.account).toBe(body.stripeAccountId);
    await expectError(await fetch(link.fields.refresh_url, { redirect: "manual" }), 400, "invalid_state");

    // The owner leaves onboarding unfinished: back at the app, told so.
    stripe.onboarding = "leave";
    const left = await follow(await fetch(refreshed.headers.get("location")!, { redirect: "manual" }));
    expect(left.status).toBe(302);
    expect(left.headers.get("location")).toBe("https://app.example/stripe?stripe_connect=onboarding");

    // Starting again resumes the same account; this time onboarding is completed.
    stripe.onboarding = "complete";
    const again = await (await startConnect(server, { mode: "create" }, app.appKey)).json();
    expect(again.stripeAccountId).toBe(body.stripeAccountId);
    expect(stripe.accountCreations.filter((f) => f["metadata[svc_app]"] === app.appId)).toHaveLength(1);
    // Each start supersedes the earlier onboarding links' ways back: one state row, however often it is started.
    expect(await server.db.prisma.billingConnectState.count({ where: { appId: app.appId, mode: "onboarding" } })).toBe(1);
    const finished = await follow(await fetch(again.url, { redirect: "manual" }));
    expect(finished.status, await finished.clone().text()).toBe(200);
    expect(await finished.json()).toMatchObject({ outcome: "connected", account: { stripeAccountId: body.stripeAccountId, connectedVia: "created", chargesEnabled: true, detailsSubmitted: true } });
    expect((await checkout(server, session, { plan: "pro" })).status).toBe(200);
    expect(stripe.checkouts.at(-1)!.stripeAccount).toBe(body.stripeAccountId);

    // GET reads Stripe again once what it knows is older than 30 s.
    stripe.accounts.get(body.stripeAccountId)!.object = { ...accountObject(body.stripeAccountId, true, {}), charges_enabled: false, requirements: { currently_due: ["individual.verification.document"], past_due: [], disabled_reason: "requirements.pending_verification" } };
    expect((await account(app)).chargesEnabled).toBe(true);
    server.clock.advance(31);
    expect(await account(app)).toMatchObject({ chargesEnabled: false, requirements: { currentlyDue: ["individual.verification.document"], disabledReason: "requirements.pending_verification" } });
  });

  it("Connect events reach only the app that connected the account: subscriptions, account.updated, and the owner revoking the platform's access", async () => {
    const a = await newApp();
    const b = await newApp();
    expect((await connectAccount(server, stripe, { appKey: a.appKey, account: "acct_1EventsA" })).status).toBe(200);
    expect((await connectAccount(server, stripe, { appKey: b.appKey, account: "acct_1EventsB" })).status).toBe(200);
    for (const app of [a, b]) {
      await server.db.prisma.plan.create({ data: { id: `plan_e_${app.appId}`, appId: app.appId, environment: "test", slug: "pro", name: "Pro", priceMicros: 1n, allowance: 5n, stripePriceId: "price_e" } });
    }
    // B's account writes metadata naming A: the subscription is B's.
    const t = unixNow(server);
    const sub = subscriptionObject({ id: "sub_events_b", customer: "cus_b", status: "active", price: "price_e", periodStart: t, periodEnd: t + 86400 * 30, metadata: { svc_app: a.appId, svc_environment: "test", svc_user: "mallory", svc_plan: "pro" } });
    expect((await deliver(server, "customer.subscription.created", sub, { account: "acct_1EventsB" })).status).toBe(200);
    const row = await server.db.prisma.subscription.findUniqueOrThrow({ where: { stripeSubscriptionId: "sub_events_b" } });
    expect(row.appId).toBe(b.appId);

    // account.updated: A's state changes, B's does not.
    const disabled = { ...accountObject("acct_1EventsA", true, {}), charges_enabled: false, requirements: { currently_due: ["external_account"], past_due: ["external_account"], disabled_reason: "requirements.past_due" } };
    expect((await deliver(server, "account.updated", disabled, { account: "acct_1EventsA", created: t + 1 })).status).toBe(200);
    expect(await account(a)).toMatchObject({ chargesEnabled: false, requirements: { pastDue: ["external_account"] } });
    expect((await account(b)).chargesEnabled).toBe(true);
    // An older update changes nothing.
    expect((await deliver(server, "account.updated", accountObject("acct_1EventsA", true, {}), { account: "acct_1EventsA", created: t - 100 })).status).toBe(200);
    expect((await account(a)).chargesEnabled).toBe(false);

    // The owner revokes the platform's access: A is detached; an old deauthorization does not detach a later connection.
    const application = { id: STANDIN_CLIENT_ID, object: "application", name: "svc" };
    expect((await deliver(server, "account.application.deauthorized", application, { account: "acct_1EventsB", created: t - 3600 })).status).toBe(200);
    expect((await account(b)).stripeAccountId).toBe("acct_1EventsB");
    expect((await deliver(server, "account.application.deauthorized", application, { account: "acct_1EventsA", created: t + 2 })).status).toBe(200);
    expect((await account(a)).stripeAccountId).toBeNull();
    expect((await account(b)).stripeAccountId).toBe("acct_1EventsB");
    // Once detached, the account's events are nobody's.
    const stray = await deliver(server, "customer.subscription.created", { ...sub, id: "sub_events_a" }, { account: "acct_1EventsA" });
    expect(stray.status).toBe(200);
    expect(await server.db.prisma.subscription.findUnique({ where: { stripeSubscriptionId: "sub_events_a" } })).toBeNull();
  });

  it("DELETE disconnects: an OAuth account is deauthorized at Stripe first (Stripe unreachable: 503, still connected); a created one is only detached; again, the same answer", async () => {
    const app = await newApp();
    expect((await connectAccount(server, stripe, { appKey: app.appKey, account: "acct_1Leaving" })).status).toBe(200);
    const del = () => server.fetch("/v1/billing/account", { method: "DELETE", headers: bearer(app.appKey) });
    stripe.failNext(500, { error: "server_error", error_description: "boom" }, 2, "/oauth/deauthorize");
    await expectError(await del(), 503, "service_unavailable");
    expect((await account(app)).stripeAccountId).toBe("acct_1Leaving");

    const res = await del();
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toMatchObject({ stripeAccountId: null, connectedVia: null });
    expect(stripe.deauthorizations.at(-1)).toEqual({ client_id: STANDIN_CLIENT_ID, stripe_user_id: "acct_1Leaving" });
    expect(stripe.accounts.get("acct_1Leaving")!.connected).toBe(false);
    expect((await del()).status).toBe(200);

    // Revoked at Stripe already (by its owner): detached all the same.
    expect((await connectAccount(server, stripe, { appKey: app.appKey, account: "acct_1Revoked" })).status).toBe(200);
    stripe.accounts.get("acct_1Revoked")!.connected = false;
    expect((await del()).status).toBe(200);
    expect((await account(app)).stripeAccountId).toBeNull();

    const deauthorizations = stripe.deauthorizations.length;
    expect((await startConnect(server, { mode: "create" }, app.appKey)).status).toBe(200);
    expect((await account(app)).connectedVia).toBe("created");
    expect((await del()).status).toBe(200);
    expect(stripe.deauthorizations.length).toBe(deauthorizations);
    expect((await account(app)).stripeAccountId).toBeNull();
  });

  it("at most 20 flows in flight per app and environment (429 with Retry-After); expired states are purged", async () => {
    const app = await newApp();
    for (let i = 0; i < 20; i++) expect((await startConnect(server, { mode: "oauth" }, app.appKey)).status).toBe(200);
    const refused = await startConnect(server, { mode: "oauth" }, app.appKey);
    expect(refused.headers.get("retry-after")).toBe("600");
    await expectError(refused, 429, "rate_limited");
    // Another app is not held back.
    expect((await startConnect(server, { mode: "oauth" }, (await newApp()).appKey)).status).toBe(200);
    server.clock.advance(601);
    expect((await startConnect(server, { mode: "oauth" }, app.appKey)).status).toBe(200);
    expect(await server.db.prisma.billingConnectState.count({ where: { appId: app.appId } })).toBe(1);
  });
});

describe("billing: Stripe Connect without a Connect client id", () => {
  let server: TestServer;
  let stripe: StripeStandIn;
  beforeAll(async () => {
    stripe = await startStripeStandIn();
    const { STRIPE_CONNECT_CLIENT_ID: _omitted, ...env } = stripeEnv(stripe);
    server = await startTestServer({ kind: "pglite", dataDir: null }, env);
  });
  afterAll(async () => {
    await server?.close();
    await stripe?.close();
  });

  it("OAuth answers 501 not_configured naming STRIPE_CONNECT_CLIENT_ID; creating an account still works", async () => {
    const oauth = await expectError(await startConnect(server, { mode: "oauth" }), 501, "not_configured");
    expect(oauth.error.message).toContain("STRIPE_CONNECT_CLIENT_ID");
    expect(stripe.authorizations).toHaveLength(0);
    const created = await startConnect(server, { mode: "create" });
    expect(created.status, await created.clone().text()).toBe(200);
    await mintSession(server, "u1");
  });
});
