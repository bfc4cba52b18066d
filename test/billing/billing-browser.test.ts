import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { chromiumAvailable, launchBrowser } from "../helpers/browser.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { completedCheckout, nested, startStripeStandIn, subscriptionObject, type StripeStandIn } from "../helpers/stripe-standin.js";
import { ACCOUNT, connectAccount, deliver, getUser, mintSession, stripeEnv, unixNow, writePlans } from "../helpers/billing.js";
import { Svc } from "@svc/sdk";
import { pairViaApi, spawnWorker } from "../helpers/worker.js";
import { startModelStandIn } from "../helpers/standins.js";
import { pollUntil } from "../helpers/process.js";

// CI installs Chromium and requires this suite; elsewhere it runs when Chromium is there.
const required = process.env.SVC_TEST_BROWSER === "1";
const UI_TIMEOUT = 15_000;

/**
 * The web components in a real browser, on an app's own page served from
 * another origin (the app's server mints the session, as an app would), and
 * the hosted billing page. Checkout lands on the Stripe stand-in; Stripe's
 * signed webhooks then set the plan the components show, and Manage
 * subscription lands on the stand-in's customer portal.
 */
describe.skipIf(!chromiumAvailable && !required)("billing components and the hosted billing page, in a real browser", () => {
  let server: TestServer;
  let stripe: StripeStandIn;
  let app: http.Server;
  let appUrl: string;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    stripe = await startStripeStandIn();
    server = await startTestServer({ kind: "pglite", dataDir: null }, stripeEnv(stripe));
    await writePlans(server);
    expect((await connectAccount(server, stripe)).status).toBe(200);
    // The app: its server mints a session for the signed-in user and renders its own page around the components.
    app = http.createServer(async (req, res) => {
      const url = new URL(req.url ?? "/", "http://app");
      const user = url.searchParams.get("user") ?? "alice";
      const { session } = await mintSession(server, user);
      const prevent = url.searchParams.has("prevent") ? `<script type="module">document.addEventListener("svc-plan-selected", (e) => { window.selected = e.detail.plan; e.preventDefault(); });</script>` : "";
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end(`<!doctype html><html><head><title>The app</title>
<style>body { font-family: sans-serif } svc-plans { --svc-accent: rgb(200, 30, 90); --svc-radius: 20px; --svc-font: "Courier New", monospace; }</style>
<script type="module" src="${server.url}/components/svc-components.js"></script>${prevent}
</head><body><h1>The app's settings</h1>
<svc-plans session="${session}" base-url="${server.url}"></svc-plans>
<svc-checkout id="buy-legacy" session="${session}" base-url="${server.url}" plan="legacy">Buy the old plan</svc-checkout>
</body></html>`);
    });
    await new Promise<void>((r) => app.listen(0, "localhost", r));
    appUrl = `http://localhost:${(app.address() as AddressInfo).port}`;
    browser = await launchBrowser();
  });
  afterEach(async () => {
    await Promise.all(contexts.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    await browser?.close();
    await new Promise((r) => app?.close(r));
    await server?.close();
    await stripe?.close();
  });

  async function open(url: string): Promise<{ page: Page; problems: string[] }> {
    const context = await browser.newContext();
    contexts.push(context);
    const page = await context.newPage();
    const problems: string[] = [];
    // Console errors (a CSP refusal, a CORS failure), and failed responses but the favicon nobody serves.
    page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && problems.push(m.text()));
    page.on("response", (r) => r.status() >= 400 && !r.url().endsWith("/favicon.ico") && problems.push(`${r.status()} ${r.url()}`));
    page.on("pageerror", (e) => problems.push(String(e)));
    await page.goto(url);
    return { page, problems };
  }

  const plan = (page: Page, slug: string) => page.locator(`svc-plans li[data-plan="${slug}"]`);

  it("an app's page on another origin shows the plans, themed by its CSS variables; Choose goes to Stripe's checkout in the app's account for this user; the webhooks then make it the current plan; then Manage subscription and Choose open Stripe's customer portal for this customer", async () => {
    const { page, problems } = await open(`${appUrl}/app?user=alice`);
    await plan(page, "pro").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(new URL(page.url()).origin).not.toBe(new URL(server.url).origin);

    // What is on sale, the default marked current, the archived plan absent; names are text, never markup.
    expect(await page.locator("svc-plans li[data-plan]").evaluateAll((els) => els.map((e) => e.getAttribute("data-plan")))).toEqual(["free", "manual", "pro", "team"]);
    expect(await plan(page, "free").getAttribute("aria-current")).toBe("true");
    expect(await plan(page, "free").locator(".badge").textContent()).toBe("Current plan");
    expect(await plan(page, "free").locator("button").count()).toBe(0);
    expect(await plan(page, "manual").locator("button").count()).toBe(0); // no Stripe price
    expect(await page.locator("svc-plans button.manage").count()).toBe(0); // nothing to manage yet
    expect(await plan(page, "team").locator(".name").textContent()).toBe("Team <b>&");
    expect(await plan(page, "team").locator("b").count()).toBe(0);
    const pro = (await plan(page, "pro").textContent()) ?? "";
    expect(pro).toContain("Pro");
    expect(pro).toMatch(/\$20\.00 \/ month/);
    expect(pro).toContain("100 runs per month");
    expect(pro).toContain("14-day free trial");

    // The app's theme reaches inside the shadow DOM.
    const choose = plan(page, "pro").locator("button");
    const look = await choose.evaluate((b) => {
      const s = getComputedStyle(b);
      return { background: s.backgroundColor, radius: s.borderTopLeftRadius, font: getComputedStyle((b.getRootNode() as ShadowRoot).host).fontFamily };
    });
    expect(look).toEqual({ background: "rgb(200, 30, 90)", radius: "12px", font: '"Courier New", monospace' });

    await choose.click();
    await page.waitForURL(`${stripe.url}/pay/**`, { timeout: UI_TIMEOUT });
    expect(await page.locator("#pay").textContent()).toMatch(/^Pay for cs_test_/);
    const sent = stripe.checkouts.at(-1)!;
    expect(page.url()).toBe(`${stripe.url}/pay/${sent.session.id}`);
    expect(sent.stripeAccount).toBe(ACCOUNT);
    expect(sent.fields.client_reference_id).toBe("alice");
    expect(nested(sent.fields, "metadata")).toMatchObject({ svc_user: "alice", svc_plan: "pro" });
    expect(sent.fields["subscription_data[trial_period_days]"]).toBe("14");
    expect(problems).toEqual([]);

    // Stripe reports the payment: the checkout, then the subscription.
    const t = unixNow(server);
    const checkout = completedCheckout({ session: String(sent.session.id), subscription: "sub_alice", customer: "cus_alice", user: "alice", plan: "pro", appId: server.dev.appId });
    expect((await deliver(server, "checkout.session.completed", checkout, { created: t })).status).toBe(200);
    const subscription = subscriptionObject({ id: "sub_alice", customer: "cus_alice", status: "trialing", price: "price_pro", periodStart: t, periodEnd: t + 14 * 86400, trialEnd: t + 14 * 86400, metadata: nested(sent.fields, "subscription_data[metadata]") });
    expect((await deliver(server, "customer.subscription.created", subscription, { created: t + 1 })).status).toBe(200);

    // Back in the app: Pro is current, and the allowance is Pro's.
    await page.goto(`${appUrl}/app?user=alice`);
    await plan(page, "pro").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await plan(page, "pro").getAttribute("aria-current")).toBe("true");
    expect(await plan(page, "pro").locator("button").count()).toBe(0);
    expect(await plan(page, "free").getAttribute("aria-current")).toBeNull();
    expect(await page.locator("svc-plans .usage").textContent()).toBe("0 of 100 runs used · 100 left · resets on December 1");
    const alice = await getUser(server, "alice");
    expect(alice.plan?.slug).toBe("pro");
    expect(alice.subscription).toMatchObject({ status: "trialing", source: "stripe" });
    expect(alice.allowance.limit).toBe(100);

    // Subscribed through Stripe: the plan is managed in Stripe's customer portal, in the app's account, for this customer.
    const manage = page.locator("svc-plans button.manage");
    expect(await manage.textContent()).toBe("Manage subscription");
    expect(await plan(page, "team").locator("button").textContent()).toBe("Choose");
    const checkouts = stripe.checkouts.length;
    await manage.click();
    await page.waitForURL(`${stripe.url}/portal/**`, { timeout: UI_TIMEOUT });
    expect(await page.locator("#portal").textContent()).toBe("Portal for cus_alice");
    const opened = stripe.portals.at(-1)!;
    expect(page.url()).toBe(`${stripe.url}/portal/${opened.session.id}`);
    expect(opened.stripeAccount).toBe(ACCOUNT);
    expect(opened.fields).toEqual({ customer: "cus_alice", return_url: `${server.url}/billing?portal=return` });

    // Choosing another plan goes to the portal too, never to a second checkout.
    await page.goto(`${appUrl}/app?user=alice`);
    await plan(page, "team").locator("button").click();
    await page.waitForURL(`${stripe.url}/portal/**`, { timeout: UI_TIMEOUT });
    expect(stripe.portals.at(-1)!.fields.customer).toBe("cus_alice");
    expect(stripe.checkouts.length).toBe(checkouts);
    expect(problems).toEqual([]);
  });

  it("shows where the user stands; a run paused at the plan's spend limit is announced, and resumes by itself and completes once the user upgrades through checkout", async () => {
    const tenant = { appId: server.dev.appId, environment: server.dev.environment };
    const svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    // paula's plan (set by the app): runs past no allowance, a $1.00 spend limit; her machine serves a model.
    await server.db.prisma.plan.create({ data: { id: "plan_capped", ...tenant, slug: "capped", name: "Capped", allowance: null, overage: true, spendCeilingMicros: 1_000_000n } });
    await svc.users.setPlan("paula", "capped");
    const model = await startModelStandIn();
    const machine = await pairViaApi(server, server.dev, "paula", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false } });
    const worker = spawnWorker(["start"], machine.home);
    try {
      await worker.waitFor(/Connected/);
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      const run = svc.runs.create({ user: "paula", prompt: "weather", tools: [{ name: "weather", run: async () => (await held, "sunny") }] });
      await pollUntil(async () => run.lastEventId, (id) => id !== null && id >= 3);
      // Meanwhile a run the app served itself cost $2.00: the limit is passed before the next turn.
      const served = svc.runs.create({ user: "paula", prompt: "x", route: { prefer: ["app"] }, serveInApp: async () => ({ output: "y", usage: { inputTokens: 1, outputTokens: 1, costMicros: 2_000_000 } }) });
      expect((await served.result()).status).toBe("handed_back");
      release();
      const runId = await run.runId;
      await pollUntil(() => svc.runs.get(runId), (r) => r.status === "paused", UI_TIMEOUT, "the run paused");

      const { page, problems } = await open(`${appUrl}/app?user=paula`);
      const notice = page.locator("svc-plans .paused");
      await notice.waitFor({ state: "visible", timeout: UI_TIMEOUT });
      expect(await notice.getAttribute("data-runs")).toBe(runId);
      expect(await notice.locator(".paused-title").textContent()).toBe("A run is paused: your plan's spend limit is reached.");
      expect(await notice.textContent()).toContain("Choose a larger plan below: it resumes where it stopped.");
      expect(await page.locator("svc-plans .spend").textContent()).toBe("$2.00 of $1.00 spend limit used · limit reached");
      expect(await page.locator("svc-plans .usage").textContent()).toBe("2 runs used · resets on December 1");
      expect(await page.locator('svc-plans [role="meter"]').getAttribute("aria-valuenow")).toBe("1000000");

      // The upgrade: checkout, then Stripe's events; the same run goes on by itself.
      await plan(page, "pro").locator("button").click();
      await page.waitForURL(`${stripe.url}/pay/**`, { timeout: UI_TIMEOUT });
      const sent = stripe.checkouts.at(-1)!;
      expect(sent.fields.client_reference_id).toBe("paula");
      const t = unixNow(server);
      const checkout = completedCheckout({ session: String(sent.session.id), subscription: "sub_paula", customer: "cus_paula", user: "paula", plan: "pro", appId: server.dev.appId });
      expect((await deliver(server, "checkout.session.completed", checkout, { created: t })).status).toBe(200);
      const subscription = subscriptionObject({ id: "sub_paula", customer: "cus_paula", status: "active", price: "price_pro", periodStart: t, periodEnd: t + 30 * 86400, metadata: nested(sent.fields, "subscription_data[metadata]") });
      expect((await deliver(server, "customer.subscription.created", subscription, { created: t + 1 })).status).toBe(200);
      const result = await run.result();
      expect(result).toMatchObject({ status: "completed" });
      expect((await svc.runs.get(runId)).turns).toBe(2);

      // Back in the app: Pro is current, nothing is paused.
      await page.goto(`${appUrl}/app?user=paula`);
      await plan(page, "pro").waitFor({ state: "visible", timeout: UI_TIMEOUT });
      expect(await plan(page, "pro").getAttribute("aria-current")).toBe("true");
      expect(await page.locator("svc-plans .paused").count()).toBe(0);
      expect(await page.locator("svc-plans .spend").count()).toBe(0);
      expect(problems).toEqual([]);
    } finally {
      worker.stop();
      await model.close();
    }
  });

  it("an app that prevents svc-plan-selected handles the choice itself: no checkout is started; a refused checkout shows the envelope's message", async () => {
    const before = stripe.checkouts.length;
    const { page } = await open(`${appUrl}/app?user=bob&prevent=1`);
    await plan(page, "team").locator("button").click();
    await expect.poll(() => page.evaluate(() => (window as unknown as { selected?: string }).selected)).toBe("team");
    await page.waitForTimeout(300);
    expect(page.url()).toContain(appUrl);
    expect(stripe.checkouts.length).toBe(before);

    await page.locator("#buy-legacy button").click();
    const alert = page.locator("#buy-legacy [role=alert]");
    await alert.waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await alert.textContent()).toBe("The plan `legacy` is no longer sold.");
    expect(stripe.checkouts.length).toBe(before);
  });

  async function addMachine(user: string, id: string, hostname: string) {
    const endUser = await server.db.prisma.endUser.findFirstOrThrow({ where: { externalId: user } });
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    await server.db.prisma.machine.create({
      data: { id, ...tenant, endUserId: endUser.id, tokenHash: `hash-${id}`, hostname, platform: "linux", arch: "x64", client: "svc-worker" },
    });
    await server.db.prisma.runtime.create({ data: { id: `rt_${id}`, ...tenant, machineId: id, name: "ollama", kind: "model", costClass: "user_hardware", models: ["llama3.2:3b", "qwen2.5:7b"] } });
  }

  it("the hosted billing page takes the session from the fragment, shows the plans and the user's machines, and refreshes the machines", async () => {
    const { session, url } = await mintSession(server, "carol");
    await addMachine("carol", "mch_carol1", "carol-desktop");
    const { page, problems } = await open(`${server.url}/billing?checkout=success#session=${session}`);
    expect(url).toContain("#session=");
    await plan(page, "pro").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(page.url()).toBe(`${server.url}/billing?checkout=success`);
    expect(await page.locator("#checkout-result").textContent()).toMatch(/^Thank you!/);

    const machine = page.locator('svc-compute-status li[data-machine-id="mch_carol1"]');
    await machine.waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await machine.locator(".hostname").textContent()).toBe("carol-desktop");
    expect(await machine.locator(".state").textContent()).toBe("offline");
    expect(await machine.locator(".runtimes").textContent()).toBe("ollama (2 models)");
    // Under the page's strict CSP the components' styles still apply (a constructed sheet, no inline style).
    const accent = await plan(page, "pro").locator("button").evaluate((b) => getComputedStyle(b).backgroundColor);
    expect(accent).toBe("rgb(36, 86, 211)");

    await addMachine("carol", "mch_carol2", "carol-laptop");
    await page.locator('svc-compute-status li[data-machine-id="mch_carol2"]').waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(problems).toEqual([]);

    // Without a session the page says where to come from.
    const bare = await open(`${server.url}/billing`);
    expect(await bare.page.locator("#notice").textContent()).toMatch(/Open this page from the app/);
    expect(await bare.page.locator("svc-plans").count()).toBe(0);
  });
});

describe.skipIf(!chromiumAvailable && !required)("the hosted billing page says why checkout is unavailable, in a real browser", () => {
  let browser: Browser;
  let stripe: StripeStandIn;
  const servers: TestServer[] = [];

  beforeAll(async () => {
    browser = await launchBrowser();
    stripe = await startStripeStandIn();
  });
  afterAll(async () => {
    await browser?.close();
    for (const s of servers) await s.close();
    await stripe?.close();
  });

  /** The hosted page for a new session: the API's overview and the words the page shows under the plans. */
  async function shown(server: TestServer, user: string) {
    const { session } = await mintSession(server, user);
    const overview = await (await server.fetch("/v1/billing", { headers: { authorization: `Bearer ${session}` } })).json();
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${server.url}/billing#session=${session}`);
      await page.locator('svc-plans li[data-plan="pro"]').waitFor({ state: "visible", timeout: UI_TIMEOUT });
      const unavailable = page.locator("svc-plans .unavailable");
      return {
        overview,
        text: (await unavailable.count()) ? await unavailable.textContent() : null,
        reason: (await unavailable.count()) ? await unavailable.getAttribute("data-reason") : null,
        notSold: await page.locator('svc-plans li[data-plan="invoice"] .not-sold').count(),
        choose: await page.locator('svc-plans li[data-plan="pro"] button').count(),
      };
    } finally {
      await context.close();
    }
  }

  it("no Stripe key on the service; no account connected; an account that cannot take charges; and once it can, a paid plan without a Stripe price", async () => {
    const bare = await startTestServer({ kind: "pglite", dataDir: null });
    servers.push(bare);
    await writePlans(bare);
    const none = await shown(bare, "u1");
    expect(none.overview).toMatchObject({ checkoutAvailable: false, checkoutUnavailableReason: "stripe_not_configured" });
    expect(none.text).toBe(none.overview.checkoutUnavailableMessage);
    expect(none.text).toMatch(/payments are not set up on this service/);
    expect(none.reason).toBe("stripe_not_configured");
    expect(none.choose).toBe(0);

    const server = await startTestServer({ kind: "pglite", dataDir: null }, stripeEnv(stripe));
    servers.push(server);
    await writePlans(server);
    await server.db.prisma.plan.create({
      data: { id: "plan_invoice", appId: server.dev.appId, environment: "test", slug: "invoice", name: "Invoiced", priceMicros: 50_000_000n, allowance: 500n },
    });
    const notConnected = await shown(server, "u2");
    expect(notConnected.overview).toMatchObject({ checkoutAvailable: false, checkoutUnavailableReason: "account_not_connected" });
    expect(notConnected.text).toMatch(/has not connected its Stripe account/);

    expect((await connectAccount(server, stripe)).status).toBe(200);
    await server.db.query(`UPDATE billing_accounts SET charges_enabled = false WHERE app_id = $1`, [server.dev.appId]);
    const noCharges = await shown(server, "u3");
    expect(noCharges.overview).toMatchObject({ checkoutAvailable: false, checkoutUnavailableReason: "charges_not_enabled" });
    expect(noCharges.text).toMatch(/cannot take payments yet/);
    expect(noCharges.choose).toBe(0);

    await server.db.query(`UPDATE billing_accounts SET charges_enabled = true WHERE app_id = $1`, [server.dev.appId]);
    const open = await shown(server, "u4");
    expect(open.overview).toMatchObject({ checkoutAvailable: true, checkoutUnavailableReason: null, checkoutUnavailableMessage: null });
    expect(open.text).toBeNull();
    expect(open.choose).toBe(1);
    expect(open.notSold).toBe(1);
  });
});
