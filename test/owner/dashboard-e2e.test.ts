import path from "node:path";
import { gzipSync } from "node:zlib";
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
import { runCalls } from "../helpers/run-calls.js";
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

  it("names a key and renames it (with its maker shown); the API requests page lists what the key did and finds a request by its id; the overview counts it and is the landing page", async () => {
    await go(`/dashboard/apps/${appId}/keys`, /Keys/);
    await page.getByLabel("Name", { exact: true }).fill("billing worker");
    await page.getByRole("button", { name: /Create key/i }).click();
    const row = page.getByRole("row").filter({ hasText: "billing worker" });
    await row.first().waitFor({ timeout: 20_000 });
    expect(await row.first().innerText()).toContain("by Ada");
    const secret = /sk_svc_[a-z0-9]+\.[A-Za-z0-9_-]+/.exec(await page.getByText(/sk_svc_[a-z0-9]+\.[A-Za-z0-9_-]{20,}/).first().innerText())![0];
    // The form starts empty again after a key is made.
    expect(await page.getByLabel("Name", { exact: true }).inputValue()).toBe("");
    await row.first().getByRole("button", { name: /^Rename/ }).click();
    // Once editing, the row holds the name in a field (its text no longer matches): found by the field's label.
    const field = page.getByRole("textbox", { name: /^Name of sk_svc_/ });
    await field.fill("billing worker (eu)");
    await field.press("Enter");
    await page.getByRole("row").filter({ hasText: "billing worker (eu)" }).first().waitFor({ timeout: 20_000 });

    // Requests with the key: one answered, one refused; the log shows both with the key's name, and finds the refused one by id.
    expect((await server.fetch("/v1/plans", { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200);
    const refused = await server.fetch("/v1/runs/run_nosuchrun", { headers: { authorization: `Bearer ${secret}` } });
    expect(refused.status).toBe(404);
    const requestId = refused.headers.get("x-request-id")!;
    await server.services.insights.requestLog.flush();
    await go(envPath("requests"), /API requests/);
    const logged = page.getByRole("row").filter({ hasText: "GET /v1/runs/run_nosuchrun" });
    await logged.first().waitFor({ timeout: 20_000 });
    expect(await logged.first().innerText()).toMatch(/404 not_found[\s\S]*billing worker \(eu\)/);
    await page.getByLabel("Request id").fill(requestId);
    await page.getByRole("button", { name: "Filter" }).click();
    await expect.poll(async () => (await page.getByRole("row").count()) - 1, { timeout: 20_000 }).toBe(1);
    expect(await page.getByRole("table").innerText()).toContain(requestId);
    // A request id from nowhere says so (the one above, found, is the control).
    await page.getByLabel("Request id").fill("req_nosuchrequest");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText(/No requests match: no request req_nosuchrequest/).waitFor({ timeout: 20_000 });

    // The overview is where an app opens, and counts the requests of the last day.
    await page.goto(`${server.url}/dashboard/apps/${appId}`);
    await heading("Overview");
    expect(new URL(page.url()).pathname).toBe(envPath("overview"));
    const tile = page.locator(".tile").filter({ hasText: "API requests, 24 h" });
    await expect.poll(async () => Number((await tile.locator(".tile-value").innerText()).replace(/,/g, "")), { timeout: 20_000 }).toBeGreaterThanOrEqual(2);
    expect(await tile.innerText()).toMatch(/[1-9]\d* failed/);
    // Each total shown equals the API's (read by the page's own session).
    const api = await page.evaluate(async (url) => (await fetch(url)).json(), `/v1/owner/apps/${appId}/env/test/overview`);
    const shown = async (label: string) => Number((await page.locator(".tile").filter({ hasText: label }).locator(".tile-value").innerText()).replace(/,/g, ""));
    await expect.poll(() => shown("Runs today"), { timeout: 20_000 }).toBe(api.runs.today);
    expect(await shown("End users")).toBe(api.users.total);
    expect(await shown("Machines online")).toBe(api.machines.online);
    expect(await shown("Tokens this month")).toBe(api.tokens.period);
  });

  it("finds a user and sees a real run's timeline: the worker's model called the app's tool and the app's answer, and the approval and who decided it, in time order", async () => {
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
      prompt: JSON.stringify([{ call: "lookup_contact", arguments: { name: "Ada" } }, { call: "send_mail", arguments: { to: "ada@example.com" } }, { say: "sent" }]),
      tools: [
        {
          name: "lookup_contact",
          run: async () => {
            throw new Error("address book offline");
          },
        },
        { name: "send_mail", needsApproval: true, run: async () => "ok" },
      ],
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
      // And Codex, turned on there but unable to run: the machine has no sandbox (as a worker advertises it, `supported: false` for older services).
      const cannot = "codex is installed and turned on, but agent CLIs run only inside a sandbox and this machine has none: bubblewrap is not installed.";
      w.send(
        workerMessage("hello", {
          client: "dashboard-test",
          version: "0",
          runtimes: [
            { name: "claude-code", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription" },
            { name: "codex", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription", supported: false, note: cannot, unavailable: { reason: "sandbox_missing", message: cannot } },
          ],
        }),
      );
      await w.next("welcome");
      w.send(workerMessage("runtime_limits", { runtime: "claude-code", windows: [{ window: "5h", status: "rejected", resetsAt: "2026-11-27T10:00:00.000Z" }, { window: "7d", status: "warning", usedPercent: 93 }], updatedAt: new Date().toISOString() }));
      // The open page keeps up on its own: the new machine and its windows appear without a reload.
      await page.getByText(/5h: spent, resets/).waitFor({ timeout: 20_000 });
      expect(await page.getByText("7d: 93% used (warning)").count()).toBe(1);
      expect(await page.getByText("cannot run (no sandbox on the machine)").count()).toBe(1);
      expect(await page.getByText(cannot).count()).toBe(1);
      // Unsupported is a version matter: an unavailable runtime is not called that.
      expect(await page.getByText(/unsupported/).count()).toBe(0);
    } finally {
      closeRawWorkers(open);
    }

    await go(envPath(`runs/${toolRunId}`), new RegExp(toolRunId));
    await page.getByText("Called weather").first().waitFor({ timeout: 20_000 });
    const body = await page.locator("main").innerText();
    expect(body).toContain("test-machine");
    expect(body).toContain("The tool said");
    // The app's answer is in the timeline, after the call, its payload one click away.
    const timeline = page.getByRole("region", { name: "Event timeline" });
    const lines = async () => (await timeline.locator("ol.timeline > li").allInnerTexts()).map((t) => t.replace(/\s+/g, " "));
    const answered = timeline.locator("li.event-app-answer").filter({ hasText: "App answered weather" });
    expect(await answered.count()).toBe(1);
    expect(await answered.innerText()).toContain('"sky": "clear"');
    await answered.locator("summary").click();
    expect(await answered.locator("pre").innerText()).toContain('"celsius": 21');
    const weather = await lines();
    expect(weather.findIndex((l) => l.includes("Called weather"))).toBeLessThan(weather.findIndex((l) => l.includes("App answered weather")));
    expect(weather.findIndex((l) => l.includes("App answered weather"))).toBeLessThan(weather.findIndex((l) => l.includes("run completed")));

    await go(envPath(`runs/${approvedId}`), new RegExp(approvedId));
    const approvals = page.getByRole("region", { name: "Approvals" });
    await approvals.getByText("send_mail").waitFor({ timeout: 20_000 });
    expect(await approvals.innerText()).toMatch(/approved/i);
    expect(await approvals.innerText()).toMatch(/app|alice/);
    // In the timeline: the error answer marked as one, the decision and who made it, each at its place among the events.
    const failed = timeline.locator("li.event-app-answer").filter({ hasText: "App answered lookup_contact" });
    expect(await failed.count()).toBe(1);
    expect(await failed.getAttribute("class")).toContain("event-error");
    expect(await failed.innerText()).toContain("error");
    expect(await failed.innerText()).toContain("address book offline");
    const ok = timeline.locator("li.event-app-answer").filter({ hasText: "App answered send_mail" });
    expect(await ok.getAttribute("class")).not.toContain("event-error");
    expect(await timeline.getByText("Approved by user alice").count()).toBe(1);
    const mail = await lines();
    const at = (text: string) => mail.findIndex((l) => l.includes(text));
    expect(at("approval request")).toBeGreaterThan(-1);
    expect(at("approval request")).toBeLessThan(at("Approved by user alice"));
    expect(at("Approved by user alice")).toBeLessThan(at("Called send_mail"));
    expect(at("Called send_mail")).toBeLessThan(at("App answered send_mail"));
    expect(at("App answered send_mail")).toBeLessThan(at("run completed"));
    // The run has ended: nothing waits.
    expect(await timeline.getByText(/Waiting for/).count()).toBe(0);
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

  it("keeps lists and a live run's inspector up to date on its own; finds a run by its id or its response's id, and says plainly when it cannot", async () => {
    const calls = runCalls(server);
    const chat = async (user: string) => {
      const res = await server.fetch("/v1/chat/completions", { method: "POST", headers: calls.headers(), body: JSON.stringify({ model: "svc/echo", user, messages: [{ role: "user", content: "hi" }] }) });
      expect(res.status).toBe(200);
    };
    // A new user shows up in the open list, no reload.
    await go(envPath("users"), /End users/);
    await page.getByRole("link", { name: "alice", exact: true }).waitFor({ timeout: 20_000 });
    await chat("newcomer");
    await page.getByRole("link", { name: "newcomer", exact: true }).waitFor({ timeout: 15_000 });

    // A run started while the runs list is open shows up in it; its inspector follows it until it ends, then stops asking.
    await go(envPath("runs"), /Runs/);
    await page.getByRole("link", { name: toolRunId }).waitFor({ timeout: 20_000 });
    const started = await calls.startRun({ user: "alice", model: "svc/echo", prompt: JSON.stringify([{ call: "lookup", arguments: { city: "Oslo" } }, { say: "found {{result}}" }]), tools: [{ name: "lookup" }] });
    expect(started.status).toBe(200);
    const runId = started.runId!;
    const row = page.getByRole("link", { name: runId });
    await row.waitFor({ timeout: 15_000 });
    const reads: string[] = [];
    const onRequest = (r: { url(): string }) => void (r.url().endsWith(`/v1/owner/apps/${appId}/env/test/runs/${runId}`) && reads.push(r.url()));
    page.on("request", onRequest);
    try {
      await row.click();
      await heading(new RegExp(runId));
      const timeline = page.getByRole("region", { name: "Event timeline" });
      await timeline.getByText("Waiting for the app to answer lookup").waitFor({ timeout: 20_000 });
      expect(await page.getByRole("status").filter({ hasText: "has not ended" }).count()).toBe(1);
      const { callId } = (await server.services.runInspector.get({ appId, environment: "test" }, runId)).toolCalls[0];
      const answer = await server.fetch(`/v1/runs/${runId}/tool_result`, { method: "POST", headers: calls.headers(), body: JSON.stringify({ callId, result: { city: "Oslo", found: true } }) });
      expect(answer.status, await answer.clone().text()).toBe(200);
      await timeline.locator("li.event-app-answer").filter({ hasText: "App answered lookup" }).waitFor({ timeout: 15_000 });
      await page.locator(".state-completed").first().waitFor({ timeout: 15_000 });
      expect(await timeline.getByText(/Waiting for/).count()).toBe(0);
      expect(await page.getByRole("status").filter({ hasText: "has not ended" }).count()).toBe(0);
      // It asked again while the run lived (the answer came in without a reload)...
      const asked = reads.length;
      expect(asked).toBeGreaterThan(1);
      // ...and not once it had ended.
      await page.waitForTimeout(6_500);
      expect(reads.length).toBe(asked);
    } finally {
      page.off("request", onRequest);
    }

    // Find a run: a malformed id and an unknown one are said on the page; a response's id opens its run.
    await go(envPath("runs"), /Runs/);
    const find = page.getByRole("form", { name: "Find a run" });
    const open = async (text: string) => {
      await find.getByLabel("Run or response id").fill(text);
      await find.getByRole("button", { name: "Open" }).click();
    };
    await open("hello there");
    expect(await find.getByRole("alert").innerText()).toContain("“hello there” is not a run id");
    await open("run_doesnotexist0000");
    await find.getByRole("alert").filter({ hasText: "No run run_doesnotexist0000" }).waitFor({ timeout: 10_000 });
    expect(await find.getByRole("alert").innerText()).toContain("in this app's test environment");
    expect(new URL(page.url()).pathname).toBe(envPath("runs"));
    await open(`resp_${runId.slice(4)}`);
    await heading(new RegExp(runId));
    expect(new URL(page.url()).pathname).toBe(envPath(`runs/${runId}`));
    // A response's id in the address opens its run too; a malformed one says so.
    await go(envPath(`runs/resp_${runId.slice(4)}`), new RegExp(runId));
    expect(new URL(page.url()).pathname).toBe(envPath(`runs/${runId}`));
    await go(envPath("runs/not-a-run"), /not-a-run/);
    expect(await page.getByRole("alert").innerText()).toContain("“not-a-run” is not a run id");

    // Read further than the first page: the rows stay where they are; newer runs are counted, shown on request.
    for (let i = 0; i < 51; i += 6) await Promise.all(Array.from({ length: Math.min(6, 51 - i) }, () => chat("pager")));
    await go(envPath("runs?user=pager"), /Runs/);
    const rows = page.getByRole("table").locator("tbody tr");
    await expect.poll(() => rows.count(), { timeout: 20_000 }).toBe(50);
    await page.getByRole("button", { name: "Load more runs" }).click();
    await expect.poll(() => rows.count(), { timeout: 20_000 }).toBe(51);
    const first = await rows.first().locator("th").innerText();
    await chat("pager");
    const newer = page.getByRole("button", { name: "1 new run: show" });
    await newer.waitFor({ timeout: 15_000 });
    expect(await rows.count()).toBe(51);
    expect(await rows.first().locator("th").innerText()).toBe(first);
    await newer.click();
    await expect.poll(() => rows.count(), { timeout: 15_000 }).toBe(52);
    expect(await rows.nth(1).locator("th").innerText()).toBe(first);
    expect(await newer.count()).toBe(0);
  }, 120_000);

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

  it("adds a webhook endpoint, sends a test event and resends it: the receiver gets the same webhook-id twice; the delivery log keeps up without a reload", async () => {
    await go(envPath("webhooks"), /Webhooks/);
    await page.getByLabel(/URL/).fill(`${receiver.url}/hooks`);
    await page.getByRole("button", { name: /Add endpoint/ }).click();
    await page.getByRole("button", { name: `Send test event to ${receiver.url}/hooks` }).click();
    const [first] = await receiver.waitFor(1);
    const id = first.headers["webhook-id"];
    const delivery = (deliveryId: string) => page.locator("ul.deliveries > li").filter({ has: page.getByRole("button", { name: `Resend delivery ${deliveryId}` }) });
    // Delivered: the log says so on its own.
    await delivery(id).locator(".state-delivered").waitFor({ timeout: 20_000 });
    await delivery(id).getByRole("button", { name: `Resend delivery ${id}` }).click();
    const got = await receiver.waitFor(2);
    expect(got[1].headers["webhook-id"]).toBe(id);
    // A delivery the page did not ask for (sent by the service meanwhile) shows up in the open log, delivered.
    const endpoint = await server.db.prisma.webhookEndpoint.findFirstOrThrow({ where: { appId, environment: "test", url: `${receiver.url}/hooks` } });
    const { deliveryId } = await server.services.webhooks.manual.ping({ appId, environment: "test" }, endpoint.id);
    await delivery(deliveryId).locator(".state-delivered").waitFor({ timeout: 20_000 });
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

  /** Bounding boxes of the frame (banner, sections, page), rounded, and the sections row's scroll and fades. */
  const frame = (p: Page) =>
    p.evaluate(() => {
      const box = (el: Element | null) => {
        if (!el) return null;
        const r = el.getBoundingClientRect();
        return { top: Math.round(r.top), bottom: Math.round(r.bottom), left: Math.round(r.left), right: Math.round(r.right), width: Math.round(r.width), height: Math.round(r.height) };
      };
      const main = document.querySelector("main")!;
      const row = document.querySelector<HTMLElement>(".sections ul")!;
      const fade = (which: string) => {
        const el = document.querySelector<HTMLElement>(`.sections-more-${which}`)!;
        return { shown: !el.hidden && getComputedStyle(el).display !== "none", box: box(el) };
      };
      return {
        viewport: { width: window.innerWidth, height: window.innerHeight },
        scrollHeight: document.documentElement.scrollHeight,
        banner: box(document.querySelector(".banner"))!,
        bannerItems: Array.from(document.querySelector(".banner")!.children, (c) => box(c)!),
        nav: box(document.querySelector(".sections"))!,
        main: box(main)!,
        h1: box(main.querySelector("h1"))!,
        contentBottom: Math.round(main.lastElementChild!.getBoundingClientRect().bottom),
        row: { ...box(row)!, scrollWidth: row.scrollWidth, clientWidth: row.clientWidth, scrollLeft: Math.round(row.scrollLeft) },
        current: box(row.querySelector("a.active")),
        before: fade("before"),
        after: fade("after"),
      };
    });

  it("on a 390×844 phone: the banner in two short rows, no blank gap around a short page, the sections one row scrolling sideways with a fade and the current one in view; the desktop as it was", async () => {
    const context = await contextAt(browser, 390);
    await context.addCookies(await page.context().cookies());
    const p = await context.newPage();
    try {
      // A short page: the runs of a user who has none.
      await p.goto(`${server.url}${envPath("runs?user=nobody")}`);
      await p.getByText("No runs match.").waitFor({ timeout: 30_000 });
      await p.screenshot({ path: path.join(SHOTS, "short-page-390.png") });
      const m = await frame(p);
      expect(m.viewport).toEqual({ width: 390, height: 844 });
      expect(m.banner.top).toBe(0);
      expect(m.banner.height).toBeLessThanOrEqual(100);
      // The sections right under the banner, the page right under them, its heading one padding below.
      expect(Math.abs(m.nav.top - m.banner.bottom)).toBeLessThanOrEqual(1);
      expect(m.nav.height).toBeLessThanOrEqual(60);
      expect(Math.abs(m.main.top - m.nav.bottom)).toBeLessThanOrEqual(1);
      expect(m.h1.top - m.nav.bottom).toBeLessThanOrEqual(20);
      // Short indeed (it ends on the screen), and nothing below it makes the screen scroll.
      expect(m.contentBottom).toBeLessThan(844);
      expect(m.scrollHeight).toBeLessThanOrEqual(844);
      // The sections: one row wider than the screen, scrolling sideways (not the page), the fade at its end says so.
      expect(m.row.scrollWidth).toBeGreaterThan(m.row.clientWidth);
      expect(m.row.right).toBeLessThanOrEqual(390);
      expect(await fitsWidth(p)).toBe(true);
      expect(m.after.shown).toBe(true);
      expect(m.after.box!.width).toBeGreaterThanOrEqual(24);
      expect(m.after.box!.right).toBe(m.nav.right);
      // The current section (Runs) is in view, whole.
      expect(m.current!.left).toBeGreaterThanOrEqual(m.row.left);
      expect(m.current!.right).toBeLessThanOrEqual(m.row.right);

      // Scrolled back to the row's start: no fade before it, one after.
      await p.locator(".sections ul").evaluate((row) => row.scrollTo({ left: 0 }));
      await expect.poll(async () => (await frame(p)).before.shown).toBe(false);
      const start = await frame(p);
      expect(start.row.scrollLeft).toBe(0);
      expect(start.after.shown).toBe(true);
      // The last section: scrolled to it on arrival, whole in view; the fade now before it, none after.
      await p.goto(`${server.url}/dashboard/apps/${appId}/members`);
      await p.getByRole("heading", { level: 1, name: /Members/ }).waitFor({ timeout: 30_000 });
      const end = await frame(p);
      expect(end.row.scrollLeft).toBeGreaterThan(0);
      expect(end.current!.left).toBeGreaterThanOrEqual(end.row.left);
      expect(end.current!.right).toBeLessThanOrEqual(end.row.right);
      expect(end.before.shown).toBe(true);
      expect(end.before.box!.left).toBe(end.nav.left);
      expect(end.after.shown).toBe(false);
      await p.screenshot({ path: path.join(SHOTS, "sections-end-390.png") });
      // The account and signing out behind the banner's Account button.
      await p.getByRole("banner").getByText("Account", { exact: true }).click();
      await p.getByRole("banner").getByRole("link", { name: "Ada" }).waitFor();
      expect(await p.getByRole("banner").getByRole("button", { name: "Sign out", exact: true }).isVisible()).toBe(true);
    } finally {
      await context.close();
    }

    // The desktop as it was: the banner one 60 px row, the sections a 13rem column beside the page, no fades.
    await go(envPath("runs?user=nobody"), /Runs/);
    const d = await frame(page);
    expect(d.banner.height).toBe(60);
    const middles = d.bannerItems.map((b) => (b.top + b.bottom) / 2);
    expect(Math.max(...middles) - Math.min(...middles)).toBeLessThanOrEqual(2);
    expect(d.nav).toMatchObject({ top: 60, left: 0, width: 208 });
    expect(d.main).toMatchObject({ top: 60, left: 208 });
    expect(d.row.scrollWidth).toBe(d.row.clientWidth);
    expect(d.before.shown).toBe(false);
    expect(d.after.shown).toBe(false);
  });

  it("loads a page with its own chunk and the shared ones only; another page's chunk when it is opened", async () => {
    // (A page opened directly, not /dashboard itself: which page that lands on is not this test's business.)
    const context = await contextAt(browser, 1280);
    await context.addCookies(await page.context().cookies());
    const p = await context.newPage();
    const loaded: { chunk: string; raw: number; gzip: number; cacheControl: string | undefined }[] = [];
    // Each chunk's body is read after its response: the network may be idle before the last read is in.
    const reading: Promise<unknown>[] = [];
    const settled = () => Promise.all(reading);
    p.on("response", (r) => {
      const m = /\/dashboard\/assets\/(.+)-[\w-]{8}\.js$/.exec(new URL(r.url()).pathname);
      if (m) reading.push(r.body().then((b) => loaded.push({ chunk: m[1], raw: b.length, gzip: gzipSync(b, { level: 9 }).length, cacheControl: r.headers()["cache-control"] })));
    });
    try {
      await p.goto(`${server.url}${envPath("runs")}`);
      await p.getByRole("heading", { level: 1, name: /Runs/ }).waitFor({ timeout: 30_000 });
      await p.waitForLoadState("networkidle");
      await settled();
      const first = loaded.map((l) => l.chunk).sort();
      expect(first).toEqual(["Runs", "index", "query", "react", "rolldown-runtime", "schema", "shared"]);
      for (const l of loaded) expect(l.cacheControl, l.chunk).toBe("public, max-age=31536000, immutable");
      const sum = (k: "raw" | "gzip") => loaded.reduce((n, l) => n + l[k], 0);
      console.info(`first load of the runs page: ${loaded.length} JS files, ${sum("raw")} bytes raw, ${sum("gzip")} gzipped (${loaded.map((l) => `${l.chunk} ${l.raw}/${l.gzip}`).join(", ")})`);
      // Another page: only its chunks come (the chart's with the usage page), nothing fetched again.
      const before = loaded.length;
      await p.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Usage" }).click();
      await p.getByRole("heading", { level: 1, name: /Usage/ }).waitFor({ timeout: 30_000 });
      await p.waitForLoadState("networkidle");
      await settled();
      expect(loaded.slice(before).map((l) => l.chunk).sort()).toEqual(["Chart", "Usage"]);
      // A page's chunk gone (a newer build replaced it while the tab was open): said in words inside the frame, with a reload.
      await p.route("**/dashboard/assets/Plans-*.js", (route) => route.fulfill({ status: 404, contentType: "application/json", body: '{"error":{"code":"not_found"}}' }));
      await p.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Plans" }).click();
      await p.getByRole("heading", { level: 1, name: "This page could not be loaded" }).waitFor({ timeout: 30_000 });
      expect(await p.getByRole("alert").innerText()).toMatch(/updated/);
      expect(await p.getByRole("button", { name: "Reload the page" }).isVisible()).toBe(true);
      expect(await p.getByRole("navigation", { name: "Sections" }).isVisible()).toBe(true);
      // Its sibling pages still open (the failure was that page's alone).
      await p.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Runs" }).click();
      await p.getByRole("heading", { level: 1, name: /Runs/ }).waitFor({ timeout: 30_000 });
    } finally {
      await context.close();
    }
  });

  const PAGES: [string, string, RegExp][] = [
    ["apps", "/dashboard/apps", /apps/i],
    ["keys", "/dashboard/apps/:app/keys", /Keys/],
    ["members", "/dashboard/apps/:app/members", /Members/],
    ["overview", "/dashboard/apps/:app/test/overview", /Overview/],
    ["users", "/dashboard/apps/:app/test/users", /End users/],
    ["user", "/dashboard/apps/:app/test/users/alice", /alice/],
    ["usage", "/dashboard/apps/:app/test/usage", /Usage/],
    ["runs", "/dashboard/apps/:app/test/runs", /Runs/],
    ["run", "/dashboard/apps/:app/test/runs/:run", /run_/],
    ["requests", "/dashboard/apps/:app/test/requests", /API requests/],
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
