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
  /** A time to the second, as the dashboard shows one (`10:03:12 AM`, `10:03:12`). */
  const SECONDS = /\b\d{1,2}:\d{2}:\d{2}\b/;

  /** The request log's rows as laid out: each time's text and lines, the request's cell and path, where the answer sits. */
  const requestLog = (p: Page) =>
    p.evaluate(() =>
      Array.from(document.querySelectorAll(".request-log tbody tr"), (tr) => {
        const time = tr.querySelector(".col-time time")!;
        const path = tr.querySelector(".request-line")!;
        const box = (el: Element) => el.getBoundingClientRect();
        return {
          time: time.textContent ?? "",
          timeLines: time.getClientRects().length,
          timeHeight: box(time).height,
          lineHeight: parseFloat(getComputedStyle(time).lineHeight),
          timeTop: box(time).top,
          answerTop: box(tr.querySelector(".col-answer")!).top,
          requestWidth: box(tr.querySelector(".col-request")!).width,
          path: path.textContent ?? "",
          pathLines: new Set(Array.from(path.getClientRects(), (r) => Math.round(r.top))).size,
        };
      }),
    );

  /**
   * A chart's bars as drawn, read from its canvas's pixels: each run of coloured columns in the plot area, left to
   * right (CSS px from the plot's left edge), with the plot's width and the days the chart shows.
   */
  const barsOf = (p: Page, title: string) =>
    p.evaluate((title) => {
      const fig = Array.from(document.querySelectorAll("figure.chart")).find((f) => f.querySelector("figcaption")?.textContent === title)!;
      const canvas = fig.querySelector("canvas")!;
      const over = fig.querySelector(".u-over")!.getBoundingClientRect();
      const c = canvas.getBoundingClientRect();
      const scale = canvas.width / c.width;
      const [x0, y0, w, h] = [(over.left - c.left) * scale, (over.top - c.top) * scale, over.width * scale, over.height * scale].map(Math.round);
      const px = canvas.getContext("2d")!.getImageData(x0, y0, w, h).data;
      // Coloured: opaque and saturated (the grid is grey, the background transparent).
      const colored = (x: number) => {
        for (let y = 0; y < h; y++) {
          const i = (y * w + x) * 4;
          if (px[i + 3] > 200 && Math.max(px[i], px[i + 1], px[i + 2]) - Math.min(px[i], px[i + 1], px[i + 2]) > 80) return true;
        }
        return false;
      };
      const bars: { left: number; right: number }[] = [];
      let start = -1;
      for (let x = 0; x <= w; x++) {
        if (x < w && colored(x)) start = start < 0 ? x : start;
        else if (start >= 0) {
          bars.push({ left: start / scale, right: x / scale });
          start = -1;
        }
      }
      return { plotWidth: over.width, days: Number(fig.getAttribute("data-days")), firstDay: fig.getAttribute("data-first-day"), bars };
    }, title);

  /** The Route cell of a run's row on the runs list. */
  const routeInList = (runId: string) =>
    page.evaluate((runId) => {
      const table = document.querySelector("main table")!;
      const column = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent).indexOf("Route");
      const row = Array.from(table.querySelectorAll("tbody tr")).find((tr) => tr.querySelector("th a")?.textContent === runId);
      return row ? (row.children[column]?.textContent ?? null) : null;
    }, runId);

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
    // The key's name beside the request's id, under its path; then the answer.
    expect(await logged.first().innerText()).toMatch(/billing worker \(eu\)[\s\S]*404 not_found/);
    await page.getByLabel("Request id").fill(requestId);
    await page.getByRole("button", { name: "Filter" }).click();
    await expect.poll(async () => (await page.getByRole("row").count()) - 1, { timeout: 20_000 }).toBe(1);
    expect(await page.getByRole("table").innerText()).toContain(requestId);
    // A request id from nowhere says so (the one above, found, is the control).
    await page.getByLabel("Request id").fill("req_nosuchrequest");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText(/No requests match: no request req_nosuchrequest/).waitFor({ timeout: 20_000 });

    // Laid out for its content: each time to the second on one line (one line box, one line high), the request's
    // path readable in a cell of its own width; on a phone each request a block that fits, time and answer on its first line.
    await go(envPath("requests"), /API requests/);
    await logged.first().waitFor({ timeout: 20_000 });
    const phone = await contextAt(browser, 390);
    await phone.addCookies(await page.context().cookies());
    const small = await phone.newPage();
    try {
      await small.goto(`${server.url}${envPath("requests")}`);
      await small.getByRole("row").filter({ hasText: "GET /v1/runs/run_nosuchrun" }).first().waitFor({ timeout: 20_000 });
      for (const [width, p] of [[1280, page], [390, small]] as const) {
        const rows = await requestLog(p);
        expect(rows.length, `${width} px`).toBeGreaterThanOrEqual(2);
        for (const r of rows) {
          expect(r.time, `${width} px`).toMatch(SECONDS);
          expect(r.timeLines, `${width} px: ${r.time}`).toBe(1);
          expect(r.timeHeight, `${width} px: ${r.time}`).toBeLessThanOrEqual(r.lineHeight);
        }
        const refusedRow = rows.find((r) => r.path === "GET /v1/runs/run_nosuchrun")!;
        expect(refusedRow.pathLines, `${width} px`).toBe(1);
        if (width === 1280) {
          expect(refusedRow.requestWidth).toBeGreaterThanOrEqual(240);
          // Every column in the page's width: the table does not scroll sideways.
          expect(await p.locator(".table-scroll").evaluate((el) => el.scrollWidth <= el.clientWidth)).toBe(true);
        } else {
          // The request has the card's whole width; the time and the answer share the first line.
          expect(refusedRow.requestWidth).toBeGreaterThanOrEqual(300);
          expect(Math.abs(refusedRow.timeTop - refusedRow.answerTop)).toBeLessThanOrEqual(4);
          expect(await fitsWidth(p)).toBe(true);
        }
        await p.locator(".request-log").scrollIntoViewIfNeeded();
        await p.screenshot({ path: path.join(SHOTS, `request-log-${width}.png`) });
      }
    } finally {
      await phone.close();
    }

    // A run handed back to the app (nobody's machine can take it, the route allows the app): counted on the overview beside failures.
    const handback = await runCalls(server).startRun({ user: "hanna", model: "auto", prompt: "hi", route: { prefer: ["app"] } });
    expect(handback).toMatchObject({ status: 409, error: { code: "serve_in_app" } });

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
    expect(api.runs.handedBackToday).toBeGreaterThanOrEqual(1);
    expect(await shown("Handed back today")).toBe(api.runs.handedBackToday);
    const handedBack = page.locator(".tile").filter({ hasText: "Handed back today" });
    expect(await handedBack.innerText()).toContain(`${api.runs.handedBackPeriod} this month`);
    expect(await handedBack.getByRole("link").getAttribute("href")).toBe(envPath("runs?status=handed_back"));
    // Beside the failures: the next tile.
    const order = await page.locator(".tile dt").allInnerTexts();
    expect(order.indexOf("Handed back today")).toBe(order.indexOf("Failed today") + 1);
    await page.screenshot({ path: path.join(SHOTS, "overview-handbacks-1280.png") });
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
    // Times to the second: the run's start and end (and how long it took), each event's, each approval's.
    const summary = await page.getByRole("region", { name: "Summary" }).innerText();
    expect(summary).toMatch(new RegExp(`Started, finished\\s+.*${SECONDS.source}.*${SECONDS.source}.*\\(took [\\d.]+ (ms|s)\\)`));
    const times = await timeline.locator("time").allInnerTexts();
    expect(times.length).toBeGreaterThan(3);
    for (const t of times) expect(t).toMatch(SECONDS);
    expect(await approvals.innerText()).toMatch(SECONDS);
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

    // Where each run went, in the same words on the list and on its page: svc/echo's, whether started as a run or
    // as a response (which records no route), "service, free"; a run on alice's machine its route and cost class.
    const echoRun = `run_${echo.id.slice(5)}`;
    const echoScripted = (await server.services.runInspector.list({ appId, environment: "test" }, { user: "alice", limit: 50 })).data.find((r) => r.model === "svc/echo" && r.source === "runs")!.id;
    const onPage = async (runId: string) => {
      await go(envPath(`runs/${runId}`), new RegExp(runId));
      return page.locator('[data-fact="route"]').innerText();
    };
    await go(envPath("runs"), /Runs/);
    await page.getByRole("link", { name: echoRun }).waitFor({ timeout: 20_000 });
    const handedBack = (await server.services.runInspector.list({ appId, environment: "test" }, { user: "hanna", limit: 50 })).data[0].id;
    const listed = Object.fromEntries(await Promise.all([echoRun, echoScripted, toolRunId, handedBack].map(async (id) => [id, await routeInList(id)] as const)));
    await page.screenshot({ path: path.join(SHOTS, "runs-route-1280.png") });
    expect(listed).toEqual({ [echoRun]: "service, free", [echoScripted]: "service, free", [toolRunId]: "user-hardware", [handedBack]: "app, app_served" });
    // Every column in the desktop's width (the time each run started too): the list does not scroll sideways.
    expect(await page.locator(".table-scroll").evaluate((el) => el.scrollWidth <= el.clientWidth)).toBe(true);
    for (const [runId, words] of Object.entries(listed)) expect(await onPage(runId), runId).toBe(words);
    // On a phone each run is a block that fits, its route in view beside its status.
    const phone = await contextAt(browser, 390);
    await phone.addCookies(await page.context().cookies());
    const small = await phone.newPage();
    try {
      await small.goto(`${server.url}${envPath("runs")}`);
      const route = small.getByRole("row").filter({ has: small.getByRole("link", { name: echoRun }) }).locator("td.col-route");
      await route.waitFor({ timeout: 20_000 });
      expect(await route.innerText()).toMatch(/service, free/);
      const box = (await route.boundingBox())!;
      expect(box.x + box.width).toBeLessThanOrEqual(390);
      expect(await fitsWidth(small)).toBe(true);
      await small.locator(".run-list").scrollIntoViewIfNeeded();
      await small.screenshot({ path: path.join(SHOTS, "runs-route-390.png") });
    } finally {
      await phone.close();
    }
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
    // The range is the service's (its today, not the browser's): every run so far was today, so each chart shows a week
    // ending today, says the empty days before it in words, and draws today's bar whole and wide at the right.
    const today = server.clock.now().toISOString().slice(0, 10);
    expect(await page.getByLabel("To", { exact: true }).inputValue()).toBe(today);
    const weekBefore = new Date(Date.parse(`${today}T00:00:00Z`) - 6 * 86_400_000).toISOString().slice(0, 10);
    const phone = await contextAt(browser, 390);
    await phone.addCookies(await page.context().cookies());
    const small = await phone.newPage();
    try {
      await small.goto(`${server.url}${envPath("usage")}`);
      await expect.poll(() => small.locator("canvas").count(), { timeout: 20_000 }).toBe(2);
      for (const [width, p] of [[1280, page], [390, small]] as const) {
        await p.screenshot({ path: path.join(SHOTS, `usage-charts-${width}.png`) });
        await p.locator("figure.chart").filter({ hasText: "Runs by day" }).screenshot({ path: path.join(SHOTS, `usage-runs-chart-${width}.png`) });
        // Nothing spent (svc/echo is free, the user's own hardware and a handback charge nothing without a plan): said, not drawn as zeros.
        const spend = p.locator("figure.chart").filter({ hasText: "Spend by day" });
        expect(await spend.locator("canvas").count()).toBe(0);
        expect(await spend.innerText()).toMatch(/Nothing from .+ to .+\./);
        for (const title of ["Runs by day and cost class", "Tokens by day"]) {
          const chart = await barsOf(p, title);
          const where = `${title} at ${width} px`;
          expect(chart, where).toMatchObject({ days: 7, firstDay: weekBefore });
          const todays = chart.bars.at(-1)!;
          const slot = chart.plotWidth / chart.days;
          expect(chart.bars.length, where).toBeGreaterThanOrEqual(1);
          expect(todays.right - todays.left, where).toBeGreaterThanOrEqual(width === 1280 ? 30 : 14);
          // Whole (not cut by the plot's edge), and in the last day's slot.
          expect(todays.right, where).toBeLessThan(chart.plotWidth - 2);
          expect(Math.abs((todays.left + todays.right) / 2 - (chart.plotWidth - slot / 2)), where).toBeLessThan(slot / 4);
        }
        expect(await p.locator("figure.chart").filter({ hasText: "Runs by day" }).locator(".chart-note").innerText()).toMatch(/^Nothing from .+: the chart starts on .+\.$/);
        expect(await fitsWidth(p)).toBe(true);
      }
    } finally {
      await phone.close();
    }
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
    // The chart: the week ending today (the service lists only days with a change; the page fills in the others).
    const chart = page.locator("figure.chart");
    expect(await chart.getAttribute("data-days")).toBe("7");
    expect(await chart.locator("canvas").count()).toBe(1);
    await chart.screenshot({ path: path.join(SHOTS, "conversions-chart-1280.png") });
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
