import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "playwright-core";
import { chromiumAvailable, launchBrowser } from "../helpers/browser.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { axeViolations, openWatched, SHOTS } from "../helpers/page-checks.js";

// CI installs Chromium and requires this suite; elsewhere it runs when Chromium is there.
const required = process.env.SVC_TEST_BROWSER === "1";
describe.skipIf(!chromiumAvailable && !required)("the dashboard's sign-in in a real browser", () => {
  let server: TestServer;
  let browser: Browser;
  beforeAll(async () => {
    fs.mkdirSync(SHOTS, { recursive: true });
    server = await startTestServer({ kind: "pglite", dataDir: null });
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  const open = (width: number, url: string) => openWatched(browser, server.url, width, url);
  const axe = axeViolations;

  for (const width of [1280, 390]) {
    it(`renders the sign-in page at ${width} px: labelled fields, keyboard first, no console error, no serious accessibility violation`, async () => {
      const w = await open(width, "/dashboard/sign-in");
      const { page } = w;
      await page.getByRole("heading", { level: 1, name: "Sign in to the svc dashboard" }).waitFor({ timeout: 30_000 });
      await expect(page.getByLabel("Email", { exact: true }).isVisible()).resolves.toBe(true);
      await expect(page.getByLabel("Password", { exact: true }).isVisible()).resolves.toBe(true);
      await expect(page.getByRole("button", { name: "Sign in" }).isVisible()).resolves.toBe(true);
      expect(await page.locator("main").count()).toBe(1);
      // The first Tab lands on the email field, with a visible focus ring.
      await page.keyboard.press("Tab");
      expect(await page.evaluate(() => (document.activeElement as HTMLInputElement | null)?.name)).toBe("email");
      expect(await page.evaluate(() => getComputedStyle(document.activeElement!).outlineStyle)).not.toBe("none");
      // Nothing wider than the screen on a phone.
      expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
      await page.screenshot({ path: path.join(SHOTS, `sign-in-${width}.png`), fullPage: true });
      expect(await axe(page)).toEqual([]);
      expect(w.pageErrors).toEqual([]);
      expect(w.consoleErrors).toEqual([]);
      expect(w.foreign).toEqual([]);
      await page.context().close();
    });
  }

  it("takes a one-time link's token from the fragment and wipes it from the address bar at once", async () => {
    const w = await open(1280, "/dashboard/sign-in#token=olt_not_a_real_token");
    const { page } = w;
    await page.getByRole("heading", { name: "Signing in with your link" }).waitFor({ timeout: 30_000 });
    expect(await page.evaluate(() => window.location.hash)).toBe("");
    expect(page.url()).toBe(`${server.url}/dashboard/sign-in`);
    // Refused (the token is unknown, or the routes are not served yet): said in words, in an alert.
    await page.getByRole("alert").first().waitFor();
    expect(await page.getByRole("alert").first().innerText()).toContain("This sign-in link did not work.");
    expect(w.pageErrors).toEqual([]);
    // The only console line allowed is the browser's own note of the refused request.
    expect(w.consoleErrors.filter((e) => !/Failed to load resource/.test(e))).toEqual([]);
    await page.context().close();
  });

  it("explains an invitation page opened without its token", async () => {
    const w = await open(390, "/dashboard/invite");
    await w.page.getByRole("heading", { level: 1, name: "Accept your invitation" }).waitFor({ timeout: 30_000 });
    expect(await w.page.getByRole("alert").innerText()).toContain("#token=oin_");
    expect(await axe(w.page)).toEqual([]);
    expect(w.pageErrors).toEqual([]);
    expect(w.consoleErrors).toEqual([]);
    await w.page.screenshot({ path: path.join(SHOTS, "invite-no-token-390.png"), fullPage: true });
    await w.page.context().close();
  });
});
