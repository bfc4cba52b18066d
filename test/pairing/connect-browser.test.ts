import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { chromiumAvailable, launchBrowser } from "../helpers/browser.js";
import { removeTempDirs } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { pairViaApi, spawnPair, spawnWorker, type WorkerProcess } from "../helpers/worker.js";

// CI installs Chromium and requires this suite; elsewhere it runs when Chromium is there.
const required = process.env.SVC_TEST_BROWSER === "1";

/** How long the page may take to show what it fetched (the machine list refreshes every 5 s). */
const UI_TIMEOUT = 15_000;

describe.skipIf(!chromiumAvailable && !required)("pairing a machine on the connect page, in a real browser with a real svc-worker", () => {
  let server: TestServer;
  let browser: Browser;
  let appName: string;
  let model: ModelStandIn;
  const workers: WorkerProcess[] = [];
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    // Workers poll every second on real timers; the running clock keeps the server's
    // poll-spacing check in step with them (a stopped clock would answer slow_down).
    server = await startTestServer({ kind: "pglite", dataDir: null }, { DEVICE_POLL_INTERVAL: "1" }, { runningClock: true });
    browser = await launchBrowser();
    appName = (await server.db.prisma.app.findUniqueOrThrow({ where: { id: server.dev.appId } })).name;
    model = await startModelStandIn();
  });
  afterEach(async () => {
    for (const w of workers.splice(0)) w.stop();
    await Promise.all(contexts.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  /** What the app's backend does: mints a session for its user, gets the connect page's link. */
  async function mintSession(user: string): Promise<{ session: string; url: string }> {
    const res = await server.fetch("/v1/end_users/session", {
      method: "POST",
      headers: { ...bearer(server.dev.appKey), "content-type": "application/json" },
      body: JSON.stringify({ user }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    return (await res.json()) as { session: string; url: string };
  }

  /** A fresh browser context (its own sessionStorage) on `url`, every request it makes recorded. */
  async function open(url: string): Promise<{ page: Page; requests: string[] }> {
    const context = await browser.newContext();
    contexts.push(context);
    const page = await context.newPage();
    const requests: string[] = [];
    page.on("request", (r) => requests.push(r.url()));
    await page.goto(url);
    return { page, requests };
  }

  /** The connect page for a new session of `user`, once it has loaded the app's details. */
  async function openSession(user: string) {
    const minted = await mintSession(user);
    const opened = await open(minted.url);
    await opened.page.locator("#steps").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    return { ...minted, ...opened };
  }

  /** `svc-worker pair` against the test server, stopped after the test. */
  function pairWorker(): WorkerProcess {
    const w = spawnPair(server.url, server.dev.connectKey);
    workers.push(w);
    return w;
  }

  async function enterCode(page: Page, typed: string) {
    await page.locator("#code").fill(typed);
    await page.locator("#continue").click();
  }

  /** The element's text once it is visible. */
  async function shownText(page: Page, selector: string): Promise<string> {
    await page.locator(selector).waitFor({ state: "visible", timeout: UI_TIMEOUT });
    return (await page.locator(selector).textContent()) ?? "";
  }

  it("approves a real worker: it gets a private pairing token, the machine belongs to the session's user, the token never leaves the fragment", async () => {
    const { session, url, page, requests } = await openSession("alice");
    expect(url).toBe(`${server.url}/connect#session=${session}`);

    expect(await page.locator("#app-name").textContent()).toBe(appName);
    const command = (await page.locator("#pairing-command").textContent()) ?? "";
    // The worker from this service by its URL (test/worker/worker-served.test.ts runs this very command), no registry name.
    expect(command).toMatch(new RegExp(`^npx --yes ${server.url.replace(/[.]/g, "\\.")}/worker/svc-worker-\\d+\\.\\d+\\.\\d+\\.tgz pair `));
    expect(command).toContain(`--connect-key ${server.dev.connectKey}`);
    expect(command).toContain(`--server ${server.url}`);
    // The token was taken out of the address bar (and so out of history and bookmarks).
    expect(page.url()).toBe(`${server.url}/connect`);

    const worker = pairWorker();
    const code = await worker.userCode();
    // Typed sloppily: lowercase, no dash. The server and page must not care.
    await enterCode(page, code.toLowerCase().replace("-", ""));
    await page.locator("#step-confirm").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await page.locator("#d-hostname").textContent()).toBe(os.hostname());
    expect(await page.locator("#d-system").textContent()).toBe(`${process.platform} ${process.arch}`);
    expect(await page.locator("#d-client").textContent()).toMatch(/^svc-worker( \S+)?$/);
    expect(await page.locator("#d-code").textContent()).toBe(code);
    expect(await page.locator("#confirm-code").textContent()).toBe(code);
    expect(await page.locator(".warning").isVisible()).toBe(true);
    expect(await page.locator(".warning").textContent()).toContain(code);

    await page.locator("#approve").click();
    expect(await shownText(page, "#result")).toMatch(/^Approved\./);
    const exit = await worker.exited;
    expect(exit, worker.stdout + worker.stderr).toEqual({ code: 0, signal: null });
    const machineId = /✓ Paired with (.+) as machine (mch_\w+)/.exec(worker.stdout);
    expect(machineId?.[1], worker.stdout).toBe(appName);

    const file = path.join(worker.home, "credentials.json");
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    const credentials = JSON.parse(fs.readFileSync(file, "utf8")) as { pairingToken: string; machineId: string };
    expect(credentials.pairingToken).toMatch(/^pt_svc_/);
    expect(credentials.machineId).toBe(machineId![2]);

    const machines = await server.db.prisma.machine.findMany({ include: { endUser: true } });
    const row = machines.find((m) => m.id === machineId![2]);
    expect(row?.endUser.externalId).toBe("alice");
    expect(row?.hostname).toBe(os.hostname());

    // The list refreshes every 5 s; the machine appears once the worker's poll made it.
    const item = page.locator(`#machines li[data-machine-id="${machineId![2]}"]`);
    await item.waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await item.textContent()).toContain(os.hostname());
    expect(await page.locator("#no-machines").isVisible()).toBe(false);

    // A reload keeps the session (sessionStorage) and shows the machine at once.
    await page.reload();
    await page.locator(`#machines li[data-machine-id="${machineId![2]}"]`).waitFor({ state: "visible", timeout: UI_TIMEOUT });

    // Fragments are never sent; strip them from what Playwright reports before checking what went out.
    const sent = requests.map((u) => u.split("#")[0]);
    expect(sent.length).toBeGreaterThanOrEqual(6);
    expect(sent.filter((u) => u.includes("est_"))).toEqual([]);
    expect(sent.filter((u) => !u.startsWith(`${server.url}/`))).toEqual([]);
  });

  it("denies a real worker: it exits 1 saying so and no machine is made", async () => {
    const before = await server.db.prisma.machine.count();
    const { page } = await openSession("bob");
    const worker = pairWorker();
    const code = await worker.userCode();
    await enterCode(page, code);
    await page.locator("#step-confirm").waitFor({ state: "visible", timeout: UI_TIMEOUT });

    await page.locator("#deny").click();
    expect(await shownText(page, "#result")).toMatch(/^Denied\./);
    expect(await page.locator("#step-confirm").isVisible()).toBe(false);
    const exit = await worker.exited;
    expect(exit.code, worker.stdout + worker.stderr).toBe(1);
    expect(worker.stdout).toMatch(/denied/);
    expect(worker.stdout).not.toMatch(/Paired/);
    expect(fs.existsSync(path.join(worker.home, "credentials.json"))).toBe(false);

    expect(await server.db.prisma.machine.count()).toBe(before);
    expect(await server.db.prisma.machine.count({ where: { endUser: { externalId: "bob" } } })).toBe(0);
    expect(await page.locator("#no-machines").isVisible()).toBe(true);
  });

  it("explains a wrong code, a malformed one and an expired one; the worker of the expired code gives up", async () => {
    const { page } = await openSession("carol");

    await enterCode(page, "BBBB-BBBB");
    expect(await shownText(page, "#code-error")).toContain("No pairing request has the code BBBB-BBBB");
    expect(await page.locator("#step-confirm").isVisible()).toBe(false);

    await enterCode(page, "hello");
    await expect.poll(() => page.locator("#code-error").textContent(), { timeout: UI_TIMEOUT }).toMatch(/^hello is not a code: codes are 8 letters/);

    const worker = pairWorker();
    const code = await worker.userCode();
    server.clock.advance(901); // past the code's 15 minutes (and carol's 10-minute session)
    const exit = await worker.exited;
    expect(exit.code, worker.stdout + worker.stderr).toBe(1);
    expect(worker.stdout).toMatch(/expired/);

    // A new session (the old one expired with the jump), as the app would mint.
    const fresh = await openSession("carol");
    await enterCode(fresh.page, code);
    expect(await shownText(fresh.page, "#code-error")).toBe(`The code ${code} has expired. Run the command on your machine again to get a new code.`);
    expect(await fresh.page.locator("#step-confirm").isVisible()).toBe(false);
  });

  it("stops on an expired session with a notice naming the app, and without a session tells the user to come from the app", async () => {
    const { page } = await openSession("dave");
    server.clock.advance(601); // past the session's 10 minutes
    // Entering a code meets the expiry; so may the page's own refresh of the machine list (every 5 s), which then
    // hides the steps before the click lands (seen once in CI). Either way the same notice must show.
    void enterCode(page, "BBBB-BBBB").catch(() => {});
    const notice = await shownText(page, "#notice");
    expect(notice).toMatch(/link has expired/);
    expect(notice).toContain(appName);
    expect(await page.locator("#steps").isVisible()).toBe(false);
    expect(await page.evaluate(() => sessionStorage.getItem("svc.session"))).toBeNull();

    const bare = await open(`${server.url}/connect`);
    expect(await shownText(bare.page, "#notice")).toMatch(/Open this page from the app/);
    expect(await bare.page.locator("#steps").isVisible()).toBe(false);
    expect(await bare.page.locator("#machines-section").isVisible()).toBe(false);
  });

  it("an ended session says it was ended, not that it expired", async () => {
    const { page } = await openSession("ended-user");
    const res = await server.fetch("/v1/end_users/session?user=ended-user", { method: "DELETE", headers: bearer(server.dev.appKey) });
    expect(res.status).toBe(200);
    await enterCode(page, "BBBB-BBBB");
    const notice = await shownText(page, "#notice");
    expect(notice).toMatch(/session was ended by/);
    expect(notice).toContain(appName);
    expect(notice).not.toMatch(/expired/);
  });

  it("takes a session that arrives by hashchange after the page loaded without one", async () => {
    const { session } = await mintSession("late-user");
    const bare = await open(`${server.url}/connect`);
    expect(await shownText(bare.page, "#notice")).toMatch(/Open this page from the app/);
    await bare.page.evaluate((s) => (location.hash = `session=${s}`), session);
    await bare.page.locator("#steps").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await bare.page.locator("#notice").isVisible()).toBe(false);
    expect(await bare.page.locator("#app-name").textContent()).toBe(appName);
    expect(await bare.page.locator("#machines-section").isVisible()).toBe(true);
    // Out of the address bar again, kept in the tab.
    expect(bare.page.url()).toBe(`${server.url}/connect`);
    expect(await bare.page.evaluate(() => sessionStorage.getItem("svc.session"))).toBe(session);
  });

  it("shows the approved machine at once, without waiting for the 5 s refresh or a reload", async () => {
    const { page } = await openSession("quick-user");
    const worker = pairWorker();
    await enterCode(page, await worker.userCode());
    await page.locator("#step-confirm").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    await page.locator("#approve").click();
    expect(await shownText(page, "#result")).toMatch(/^Approved\./);
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    // The worker polls every second here: its machine exists within about a second of the approval,
    // and the page shows it within about a second of that (the regular refresh is every 5 s).
    const machineId = /as machine (mch_\w+)/.exec(worker.stdout)![1];
    await page.locator(`#machines li[data-machine-id="${machineId}"]`).waitFor({ state: "visible", timeout: 2500 });
  });

  it("fits a 390 px wide phone screen: no horizontal scroll on the steps, the confirm step or the machine list", async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
    contexts.push(context);
    const page = await context.newPage();
    const minted = await mintSession("phone-user");
    const fitting = () => page.evaluate(() => document.scrollingElement!.scrollWidth);
    // A machine with a long hostname already listed.
    await pairViaApi(server, server.dev, "phone-user", {}, "a-very-long-hostname-of-a-build-machine.internal.example.com");
    await page.goto(minted.url);
    await page.locator("#steps").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    await page.locator("#machines li").first().waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await fitting()).toBeLessThanOrEqual(390);
    const worker = pairWorker();
    await enterCode(page, await worker.userCode());
    await page.locator("#step-confirm").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await fitting()).toBeLessThanOrEqual(390);
    await page.locator("#deny").click();
    await shownText(page, "#result");
    expect(await fitting()).toBeLessThanOrEqual(390);
  });

  /** What makes a button stand out, as the browser renders it. */
  function looks(page: Page, selector: string) {
    return page.evaluate((sel) => {
      const el = document.querySelector(sel)!;
      const s = getComputedStyle(el);
      const r = el.getBoundingClientRect();
      return {
        style: {
          fontSize: s.fontSize,
          fontWeight: s.fontWeight,
          padding: s.padding,
          background: s.backgroundColor,
          color: s.color,
          border: `${s.borderWidth} ${s.borderStyle} ${s.borderColor}`,
        },
        width: r.width,
        height: r.height,
      };
    }, selector);
  }

  /** The confirm step for a fresh worker's code, submitted by `submit`; then Approve and Deny must look alike. */
  async function expectEquallyProminent(submit: (page: Page) => Promise<void>) {
    const { page } = await openSession("erin");
    const worker = pairWorker();
    await page.locator("#code").fill(await worker.userCode());
    await submit(page);
    await page.locator("#step-confirm").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    const approve = await looks(page, "#approve");
    const deny = await looks(page, "#deny");
    expect(approve.width).toBeGreaterThan(0);
    expect(Math.abs(approve.width - deny.width)).toBeLessThanOrEqual(2);
    expect(Math.abs(approve.height - deny.height)).toBeLessThanOrEqual(2);
    expect(approve.style).toEqual(deny.style);
    return page;
  }

  it("shows Approve and Deny equally prominent after the code is submitted with the mouse", async () => {
    await expectEquallyProminent((page) => page.locator("#continue").click());
  });

  // Most people type the code and press Enter: neither button may then be focused
  // (it would look like the default), and a second, impatient Enter must not approve.
  it("shows Approve and Deny equally prominent after the code is submitted with Enter, and a second Enter approves nothing", async () => {
    const page = await expectEquallyProminent((page) => page.locator("#code").press("Enter"));
    const answers: string[] = [];
    page.on("request", (r) => {
      if (/\/device\/(approve|deny)$/.test(r.url())) answers.push(r.url());
    });
    await page.keyboard.press("Enter");
    await page.waitForTimeout(300);
    expect(answers).toEqual([]);
    expect(await page.locator("#step-confirm").isVisible()).toBe(true);
  });

  /** `svc-worker start` for a machine paired through the API, serving the model stand-in only; once it says it is online. */
  async function startPairedWorker(user: string, hostname: string) {
    const paired = await pairViaApi(server, server.dev, user, { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } }, hostname);
    const worker = spawnWorker(["start"], paired.home);
    workers.push(worker);
    await worker.waitFor(/✓ Connected to .+ as mch_/);
    return { ...paired, worker };
  }

  /** The machine's row in the list and its state badge. */
  function machineItem(page: Page, machineId: string) {
    const item = page.locator(`#machines li[data-machine-id="${machineId}"]`);
    return { item, state: item.locator(".state"), remove: item.locator("button.remove") };
  }

  it("shows a running machine online, and Remove takes it away for good", async () => {
    const { home, machineId, worker } = await startPairedWorker("grace", "grace-desktop");
    const { page } = await openSession("grace");
    const { item, state, remove } = machineItem(page, machineId);
    await item.waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await item.locator("strong").textContent()).toBe("grace-desktop");
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT }).toBe("online");
    expect(await remove.textContent()).toBe("Remove");

    // Cancel: nothing is sent, the machine stays paired and its worker keeps serving.
    const deletes: string[] = [];
    page.on("request", (r) => {
      if (r.method() === "DELETE") deletes.push(r.url());
    });
    let asked = "";
    page.once("dialog", (d) => {
      asked = d.message();
      void d.dismiss();
    });
    await remove.click();
    await expect.poll(() => asked).toContain("grace-desktop");
    await page.waitForTimeout(300);
    expect(deletes).toEqual([]);
    expect(await page.locator("#result").isVisible()).toBe(false);
    expect((await server.db.prisma.machine.findUniqueOrThrow({ where: { id: machineId } })).revokedAt).toBeNull();
    expect(worker.child.exitCode).toBeNull();
    expect(await item.isVisible()).toBe(true);

    // OK: removed at once, the list no longer shows it, the worker is told and stops.
    page.once("dialog", (d) => void d.accept());
    await remove.click();
    expect(await shownText(page, "#result")).toBe("Removed grace-desktop.");
    await item.waitFor({ state: "detached", timeout: UI_TIMEOUT });
    expect(await page.locator("#no-machines").isVisible()).toBe(true);
    const exit = await worker.exited;
    expect(exit.code, worker.stdout + worker.stderr).toBe(1);
    expect(worker.stdout).toMatch(new RegExp(`This machine was removed from ${appName}`));
    expect((await server.db.prisma.machine.findUniqueOrThrow({ where: { id: machineId } })).revokedAt).toBeInstanceOf(Date);

    // The old token is refused for good: `status` checks it with a real WebSocket handshake.
    const status = spawnWorker(["status"], home);
    workers.push(status);
    const checked = await status.exited;
    expect(checked.code, status.stdout + status.stderr).toBe(1);
    expect(status.stdout).toMatch(/Token: refused/);

    // And a reload does not bring it back.
    await page.reload();
    await page.locator("#no-machines").waitFor({ state: "visible", timeout: UI_TIMEOUT });
    expect(await item.count()).toBe(0);
  });

  it("a machine that stops shows offline", async () => {
    const { machineId, worker } = await startPairedWorker("heidi", "heidi-laptop");
    const { page } = await openSession("heidi");
    const { state } = machineItem(page, machineId);
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT }).toBe("online");

    // Ctrl-C: the wrapper forwards it to the real worker, which says goodbye and exits.
    worker.child.kill("SIGINT");
    const exit = await worker.exited;
    expect(worker.stdout, worker.stderr).toMatch(/Stopped\./);
    expect(exit, worker.stdout + worker.stderr).toEqual({ code: 0, signal: null });

    // Offline well before the heartbeat timeout: the closed connection marks it so at once.
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT }).toBe("offline");
    expect(await state.getAttribute("class")).toBe("state offline");
    expect((await server.db.prisma.machine.findUniqueOrThrow({ where: { id: machineId } })).revokedAt).toBeNull();
  });
});
