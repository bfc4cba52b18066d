import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser, Page } from "playwright-core";
import { Svc } from "@svc/sdk";
import { chromiumAvailable, launchBrowser } from "../helpers/browser.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { axeViolations, contextAt, fitsWidth, overflowing, SHOTS, watch, type Watched } from "../helpers/page-checks.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { startStripeStandIn, completedCheckout, subscriptionObject, type StripeStandIn } from "../helpers/stripe-standin.js";
import { ACCOUNT, deliver, stripeEnv, unixNow, writePlans } from "../helpers/billing.js";
import { startReceiver, type Receiver } from "../helpers/webhook-receiver.js";
import { signInOwner } from "../helpers/owner.js";
import { closeRawWorkers, connectRawWorker } from "../helpers/raw-worker.js";
import { workerMessage } from "@svc/contract";
import type WebSocket from "ws";

// CI installs Chromium and requires this suite; elsewhere it runs when Chromium is there.
const required = process.env.SVC_TEST_BROWSER === "1";
const PASSWORD = "correct horse battery staple";

/**
 * The app owner's dashboard end to end in real Chromium, against the real service on PGlite with a
 * real worker process serving a model stand-in, the Stripe stand-in and a real webhook receiver.
 * The data layer of each read is proved on both databases in owner-data.test.ts; this suite proves
 * what the owner sees and does, page by page, at desktop and phone widths.
 */
describe.skipIf(!chromiumAvailable && !required)("the dashboard end to end in a real browser", () => {
  let server: TestServer;
  let browser: Browser;
  let model: ModelStandIn;
  let stripe: StripeStandIn;
  let receiver: Receiver;
  let worker: WorkerProcess;
  let page: Page;
  let watched: Watched;
  let appId: string;
  let toolRunId: string;
  const email = "ada@example.com";

  beforeAll(async () => {
    stripe = await startStripeStandIn();
    model = await startModelStandIn();
    receiver = await startReceiver();
    server = await startTestServer({ kind: "pglite", dataDir: null }, { ...stripeEnv(stripe), WEBHOOK_PRIVATE_ADDRESSES: "test", WEBHOOK_RETRY_SCHEDULE: "0.2,0.4" }, { runningClock: true });
    appId = server.dev.appId;
    const alice = await pairViaApi(server, server.dev, "alice", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false } });
    worker = spawnWorker(["start"], alice.home);
    await worker.waitFor(/Connected/);
    const owner = await server.services.owners.accounts.create({ email, name: "Ada", password: PASSWORD });
    await server.services.owners.members.add(appId, owner.id, "owner");
    browser = await launchBrowser();
    page = await (await contextAt(browser, 1280)).newPage();
    watched = watch(page, server.url);
  }, 120_000);

  afterAll(async () => {
    worker?.stop();
    await browser?.close();
    await server?.close();
    await model?.close();
    await stripe?.close();
    await receiver?.close();
    removeTempDirs();
  });

  const envPath = (p: string) => `/dashboard/apps/${appId}/test/${p}`;
  const heading = (name: string | RegExp) => page.getByRole("heading", { level: 1, name }).waitFor({ timeout: 30_000 });
  const go = async (p: string, title: string | RegExp) => {
    await page.goto(`${server.url}${p}`);
    await heading(title);
  };

  it("signs in with a password and lands on the app", async () => {
    await page.goto(`${server.url}/dashboard/sign-in`);
    await page.getByLabel("Email", { exact: true }).fill(email);
    await page.getByLabel("Password", { exact: true }).fill(PASSWORD);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL((u) => !u.pathname.endsWith("/sign-in"), { timeout: 30_000 });
    await expect.poll(() => page.getByText("Local development app").count(), { timeout: 20_000 }).toBeGreaterThan(0);
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === "svc_owner")!;
    expect(session).toMatchObject({ httpOnly: true, sameSite: "Strict" });
  });

  it("creates a key, shown once, that works; rotates it with the old one kept through the grace", async () => {
    await go(`/dashboard/apps/${appId}/keys`, /Keys/);
    await page.getByRole("button", { name: /Create key/i }).click();
    const secretOf = async () => {
      const text = await page.getByText(/sk_svc_[a-z0-9]+\.[A-Za-z0-9_-]{20,}/).first().innerText();
      return /sk_svc_[a-z0-9]+\.[A-Za-z0-9_-]+/.exec(text)![0];
    };
    await page.getByText(/sk_svc_[a-z0-9]+\.[A-Za-z0-9_-]{20,}/).first().waitFor({ timeout: 20_000 });
    const created = await secretOf();
    const usersWith = (key: string) => server.fetch("/v1/plans", { headers: { authorization: `Bearer ${key}` } });
    expect((await usersWith(created)).status).toBe(200);
    const display = `${created.slice(0, created.indexOf(".") + 1)}`;
    page.once("dialog", (d) => void d.accept());
    await page.getByRole("button", { name: new RegExp(`^Rotate ${display.replace(/[.]/g, "\\.")}`) }).click();
    await expect.poll(async () => (await secretOf()) !== created, { timeout: 20_000 }).toBe(true);
    const rotated = await secretOf();
    expect((await usersWith(rotated)).status).toBe(200);
    expect((await usersWith(created)).status, "the old key works through the grace period").toBe(200);
  });

  it("finds a user and sees a real run's timeline: the worker's model called the app's tool, and the approval and who decided it", async () => {
    const svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1`, maxRetries: 0 });
    const run = svc.runs.create({
      user: "alice",
      prompt: "What is the weather in Paris?",
      model: "auto",
      tools: [{ name: "weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } }, run: async () => ({ sky: "clear", celsius: 21 }) }],
    });
    const result = await run.result();
    expect(result.status).toBe("completed");
    toolRunId = await run.runId;
    const approved = svc.runs.create({
      user: "alice",
      model: "svc/echo",
      prompt: JSON.stringify([{ call: "send_mail", arguments: { to: "ada@example.com" } }, { say: "sent" }]),
      tools: [{ name: "send_mail", needsApproval: true, run: async () => "ok" }],
      onApproval: async () => ({ decision: "allow" }),
    });
    expect((await approved.result()).status).toBe("completed");
    const approvedId = await approved.runId;

    await go(envPath("users"), /End users/);
    await page.getByLabel("Search by user id or email").fill("ali");
    await page.getByRole("button", { name: "Search" }).click();
    await page.getByRole("link", { name: "alice" }).click();
    await heading(/alice/);
    await page.getByText("test-machine").first().waitFor({ timeout: 20_000 });
    expect(await page.getByText("ollama").count()).toBeGreaterThan(0);
    // A second machine of alice's with Claude Code on a subscription, whose windows it reported: shown per runtime.
    const open: WebSocket[] = [];
    try {
      const laptop = await pairViaApi(server, server.dev, "alice");
      const w = await connectRawWorker(server.url, laptop.token, open);
      w.send(workerMessage("hello", { client: "dashboard-test", version: "0", runtimes: [{ name: "claude-code", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription" }] }));
      await w.next("welcome");
      w.send(workerMessage("runtime_limits", { runtime: "claude-code", windows: [{ window: "5h", status: "rejected", resetsAt: "2026-11-27T10:00:00.000Z" }, { window: "7d", status: "warning", usedPercent: 93 }], updatedAt: new Date().toISOString() }));
      await expect.poll(async () => (await page.reload(), await page.getByText(/5h: spent, resets/).count()), { timeout: 20_000 }).toBeGreaterThan(0);
      expect(await page.getByText("7d: 93% used (warning)").count()).toBe(1);
    } finally {
      closeRawWorkers(open);
    }

    await go(envPath(`runs/${toolRunId}`), new RegExp(toolRunId));
    await page.getByText("Called weather").first().waitFor({ timeout: 20_000 });
    const body = await page.locator("main").innerText();
    expect(body).toContain("test-machine");
    expect(body).toContain("The tool said");

    await go(envPath(`runs/${approvedId}`), new RegExp(approvedId));
    const approvals = page.getByRole("region", { name: "Approvals" });
    await approvals.getByText("send_mail").waitFor({ timeout: 20_000 });
    expect(await approvals.innerText()).toMatch(/approved/i);
    expect(await approvals.innerText()).toMatch(/app|alice/);
  });

  it("shows responses beside runs and chat completions: the list says what started each, the inspector shows a response's items", async () => {
    const svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1`, maxRetries: 0 });
    const machine = await svc.responses.create({ model: "auto", user: "alice", instructions: "Be brief.", input: "hello from the dashboard test" });
    expect(machine.status).toBe("completed");
    const echo = await svc.responses.create({ model: "svc/echo", user: "alice", input: "echoed for the inspector" });
    await go(envPath("runs"), /Runs/);
    const table = page.getByRole("table");
    await table.getByRole("link", { name: `run_${machine.id.slice(5)}` }).waitFor({ timeout: 20_000 });
    const row = table.getByRole("row").filter({ has: page.getByRole("link", { name: `run_${machine.id.slice(5)}` }) });
    expect(await row.innerText()).toContain("response");
    // A positive control: a run started by POST /v1/runs says so.
    const runRow = table.getByRole("row").filter({ has: page.getByRole("link", { name: toolRunId }) });
    expect(await runRow.innerText()).toMatch(/\brun\b/);

    await go(envPath(`runs/run_${machine.id.slice(5)}`), new RegExp(machine.id.slice(5)));
    const items = page.getByRole("region", { name: "Response items" });
    await items.waitFor({ timeout: 20_000 });
    const text = await items.innerText();
    expect(text).toContain("Be brief.");
    expect(text).toContain("hello from the dashboard test");
    expect(await page.locator("main").innerText()).toContain(`POST /v1/responses (${machine.id})`);
    await go(envPath(`runs/run_${echo.id.slice(5)}`), new RegExp(echo.id.slice(5)));
    const echoed = await page.getByRole("region", { name: "Response items" }).innerText();
    expect(echoed.match(/echoed for the inspector/g)).toHaveLength(2); // its input item, and its output
  });

  it("shows usage charts after the runs, and exports the ledger as CSV", async () => {
    await go(envPath("usage"), /Usage/);
    await expect.poll(() => page.locator("canvas").count(), { timeout: 20_000 }).toBeGreaterThan(0);
    const byClass = page.getByRole("region", { name: "By cost class" });
    await byClass.getByText("User's hardware").waitFor({ timeout: 20_000 });
    expect(await page.getByRole("region", { name: "Top users" }).innerText()).toContain("alice");
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: /Export CSV/ }).or(page.getByRole("link", { name: /Export CSV/ })).click()]);
    const csv = await (await download.createReadStream()).toArray();
    const text = Buffer.concat(csv).toString("utf8");
    expect(text.split("\r\n")[0]).toMatch(/user/);
    expect(text).toContain(toolRunId);
  });

  it("connects Stripe through the stand-in's OAuth page and shows the account", async () => {
    stripe.signIn(ACCOUNT);
    await go(envPath("billing"), /Billing/);
    await page.getByRole("button", { name: /Connect/ }).first().click();
    await page.waitForURL((u) => u.pathname.includes("/dashboard/") && u.pathname.endsWith("/billing"), { timeout: 30_000 });
    await page.getByText(ACCOUNT).first().waitFor({ timeout: 30_000 });
  });

  it("shows a conversion after a trial converts, with its payment linked to the user", async () => {
    await writePlans(server);
    const now = unixNow(server);
    const sub = (status: string) =>
      subscriptionObject({ id: "sub_bea", customer: "cus_bea", status, price: "price_pro", periodStart: now, periodEnd: now + 14 * 86400, trialEnd: now + 14 * 86400, metadata: { svc_app: appId, svc_environment: "test", svc_user: "bea", svc_plan: "pro" } });
    expect((await deliver(server, "checkout.session.completed", completedCheckout({ session: "cs_bea", subscription: "sub_bea", customer: "cus_bea", user: "bea", plan: "pro", appId, paid: false }), { created: now })).status).toBe(200);
    expect((await deliver(server, "customer.subscription.created", sub("trialing"), { created: now + 1 })).status).toBe(200);
    expect((await deliver(server, "customer.subscription.updated", sub("active"), { created: now + 2 })).status).toBe(200);
    const invoice = { id: "in_bea1", object: "invoice", customer: "cus_bea", amount_paid: 2000, currency: "usd", status: "paid", status_transitions: { paid_at: now + 3 }, parent: { type: "subscription_details", subscription_details: { subscription: "sub_bea", metadata: {} } } };
    expect((await deliver(server, "invoice.paid", invoice, { created: now + 3 })).status).toBe(200);

    await go(envPath("conversions"), /Conversions/);
    const perPlan = page.getByRole("region", { name: "Per plan" });
    await perPlan.getByText("Pro").waitFor({ timeout: 20_000 });
    const row = perPlan.getByRole("row", { name: /Pro/ });
    expect((await row.innerText()).replace(/\s+/g, " ")).toMatch(/Pro 1 1 0/);
    const payments = page.getByRole("region", { name: "Payments" });
    expect(await payments.innerText()).toContain("bea");
    expect(await payments.innerText()).toContain("$20.00");
  });

  it("adds a webhook endpoint, sends a test event and resends it: the receiver gets the same webhook-id twice", async () => {
    await go(envPath("webhooks"), /Webhooks/);
    await page.getByLabel(/URL/).fill(`${receiver.url}/hooks`);
    await page.getByRole("button", { name: /Add endpoint/ }).click();
    await page.getByRole("button", { name: `Send test event to ${receiver.url}/hooks` }).click();
    const [first] = await receiver.waitFor(1);
    const id = first.headers["webhook-id"];
    const resend = page.getByRole("button", { name: new RegExp(`Resend delivery ${id}`) });
    await expect.poll(async () => {
      await page.reload();
      await heading(/Webhooks/);
      return resend.count();
    }, { timeout: 20_000 }).toBe(1);
    await resend.click();
    const got = await receiver.waitFor(2);
    expect(got[1].headers["webhook-id"]).toBe(id);
  });

  it("refuses a change sent without the CSRF token, from the signed-in page itself", async () => {
    const answer = await page.evaluate(async () => {
      const res = await fetch("/v1/owner/apps", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "Forged" }) });
      return { status: res.status, body: await res.json() };
    });
    expect(answer).toMatchObject({ status: 403, body: { error: { code: "forbidden" } } });
    const apps = await server.db.prisma.app.count({ where: { name: "Forged" } });
    expect(apps).toBe(0);
  });

  it("the first hour's fixes: a plan created says so and the form starts empty; the app switcher closes on a choice; the account page keeps the app; a loopback webhook URL is warned about", async () => {
    const errors: string[] = [];
    page.on("console", (m) => void (m.type() === "error" && errors.push(m.text())));
    await go(envPath("plans"), /Plans/);
    const form = page.getByRole("form", { name: "New plan" });
    // The slug's pattern holds under the `v` flag browsers apply: a slug with a capital is refused by the form itself.
    await form.getByLabel("Slug").fill("Bad Slug");
    expect(await form.getByLabel("Slug").evaluate((el) => (el as HTMLInputElement).validity.patternMismatch)).toBe(true);
    await form.getByLabel("Slug").fill("first-hour");
    expect(await form.getByLabel("Slug").evaluate((el) => (el as HTMLInputElement).validity.valid)).toBe(true);
    await form.getByLabel("Name").fill("First hour");
    await form.getByLabel(/^Price/).fill("5");
    await form.getByRole("button", { name: "Create plan" }).click();
    await page.getByRole("status").filter({ hasText: "Plan First hour (first-hour) created" }).waitFor({ timeout: 20_000 });
    expect(await page.getByRole("form", { name: "New plan" }).getByLabel("Slug").inputValue()).toBe("");
    expect(await server.db.prisma.plan.count({ where: { appId, slug: "first-hour" } })).toBe(1);

    const other = await server.services.keys.createApp("Second app", "test");
    await server.services.owners.members.add(other.appId, (await server.db.prisma.owner.findFirstOrThrow({ where: { email } })).id, "owner");
    await page.reload();
    await heading(/Plans/);
    const switcher = page.locator("details.switcher");
    await switcher.locator("summary").click();
    await switcher.getByRole("link", { name: /Second app/ }).click();
    await heading(/End users|Plans/);
    expect(await switcher.evaluate((d) => (d as HTMLDetailsElement).open)).toBe(false);
    await switcher.locator("summary").click();
    await switcher.getByRole("link", { name: new RegExp(appId) }).click();
    await heading(/Plans|End users/);

    await page.getByRole("banner").getByRole("link", { name: /Ada/ }).click();
    await heading(/account/i);
    expect(await switcher.locator("summary").innerText()).toContain((await server.db.prisma.app.findUniqueOrThrow({ where: { id: appId } })).name);
    expect(await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Runs" }).getAttribute("href")).toBe(`/dashboard/apps/${appId}/test/runs`);

    // This suite's service lets the test environment reach private addresses (WEBHOOK_PRIVATE_ADDRESSES=test): a loopback
    // endpoint of `test` is fine, the same in `live` is warned about, naming the setting.
    for (const environment of ["test", "live"] as const) await server.services.webhooks.endpoints.create({ appId, environment }, { url: "http://localhost:9/first-hour" });
    await go(envPath("webhooks"), /Webhooks/);
    const testRow = page.getByRole("row").filter({ hasText: "http://localhost:9/first-hour" });
    await testRow.waitFor({ timeout: 20_000 });
    expect(await testRow.getByRole("note").count()).toBe(0);
    await go(`/dashboard/apps/${appId}/live/webhooks`, /Webhooks/);
    const liveRow = page.getByRole("row").filter({ hasText: "http://localhost:9/first-hour" });
    await liveRow.waitFor({ timeout: 20_000 });
    expect(await liveRow.getByRole("note").innerText()).toMatch(/localhost is a loopback or private address.*WEBHOOK_PRIVATE_ADDRESSES/);
    expect(errors).toEqual([]);
  });

  it("does not show another owner's app: an owner of another app sees it as not found", async () => {
    const other = await server.services.keys.createApp("Other app", "test");
    const stranger = await signInOwner(server, { appId: other.appId });
    const context = await contextAt(browser, 1280);
    const [name, value] = stranger.cookie.split("=");
    await context.addCookies([{ name, value, url: server.url, httpOnly: true, sameSite: "Strict" }]);
    const theirs = await context.newPage();
    await theirs.goto(`${server.url}/dashboard/apps/${appId}/test/users`);
    await theirs.getByRole("alert").first().waitFor({ timeout: 30_000 });
    expect(await theirs.getByRole("alert").first().innerText()).toMatch(/No app|not found/i);
    expect(await theirs.locator("main").innerText()).not.toContain("alice");
    expect((await stranger.fetch(`/v1/owner/apps/${appId}/env/test/users`)).status).toBe(404);
    await context.close();
  });

  const PAGES: [string, string, RegExp][] = [
    ["apps", "/dashboard/apps", /apps/i],
    ["keys", "/dashboard/apps/:app/keys", /Keys/],
    ["members", "/dashboard/apps/:app/members", /Members/],
    ["users", "/dashboard/apps/:app/test/users", /End users/],
    ["user", "/dashboard/apps/:app/test/users/alice", /alice/],
    ["usage", "/dashboard/apps/:app/test/usage", /Usage/],
    ["runs", "/dashboard/apps/:app/test/runs", /Runs/],
    ["run", "/dashboard/apps/:app/test/runs/:run", /run_/],
    ["plans", "/dashboard/apps/:app/test/plans", /Plans/],
    ["billing", "/dashboard/apps/:app/test/billing", /Billing/],
    ["conversions", "/dashboard/apps/:app/test/conversions", /Conversions/],
    ["webhooks", "/dashboard/apps/:app/test/webhooks", /Webhooks/],
    ["account", "/dashboard/account", /account/i],
  ];
  for (const width of [1280, 390]) {
    it(`every page at ${width} px: fits the screen, no serious accessibility violation, no console error; screenshots kept`, async () => {
      const context = await contextAt(browser, width);
      await context.addCookies(await page.context().cookies());
      const p = await context.newPage();
      const w = watch(p, server.url);
      const problems: string[] = [];
      for (const [name, route, title] of PAGES) {
        await p.goto(`${server.url}${route.replace(":app", appId).replace(":run", toolRunId)}`);
        try {
          await p.getByRole("heading", { level: 1, name: title }).waitFor({ timeout: 10_000 });
          await p.waitForLoadState("networkidle", { timeout: 10_000 });
        } catch {
          problems.push(`${name}: no heading ${title} (h1: ${await p.locator("h1").allInnerTexts()})`);
          continue;
        }
        await p.screenshot({ path: path.join(SHOTS, `${name}-${width}.png`), fullPage: true });
        if (!(await fitsWidth(p))) problems.push(`${name}: wider than ${width} px: ${(await overflowing(p)).join(", ")}`);
        for (const v of await axeViolations(p)) problems.push(`${name}: ${v}`);
      }
      expect(problems).toEqual([]);
      expect(w.pageErrors).toEqual([]);
      expect(w.consoleErrors).toEqual([]);
      expect(w.foreign).toEqual([]);
      await context.close();
    }, 300_000);
  }

  it("the signed-in page logged no error and asked no other host", () => {
    expect(watched.pageErrors).toEqual([]);
    // The one other host is Stripe's, when the owner connects an account (its OAuth page).
    expect(watched.foreign.filter((u) => !u.startsWith(stripe.connectUrl))).toEqual([]);
  });
});
