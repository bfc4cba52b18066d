import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "playwright-core";
import { chromiumAvailable, launchBrowser } from "../helpers/browser.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

// CI installs Chromium and requires this suite; elsewhere it runs when Chromium is there.
const required = process.env.SVC_TEST_BROWSER === "1";

describe.skipIf(!chromiumAvailable && !required)("the API reference page in a real browser", () => {
  let server: TestServer;
  let browser: Browser;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it("renders every operation from /v1/openapi.json, loading nothing from another host", async () => {
    const page = await browser.newPage();
    const foreign: string[] = [];
    const failed: string[] = [];
    page.on("request", (r) => {
      if (!r.url().startsWith(server.url) && !r.url().startsWith("data:")) foreign.push(r.url());
    });
    page.on("requestfailed", (r) => failed.push(r.url()));
    await page.goto(`${server.url}/docs`);
    await page.getByText("svc API").first().waitFor({ timeout: 30_000 });
    await page.locator(".opblock").first().waitFor();
    const paths = await page.locator(".opblock-summary-path").allInnerTexts();
    const normalized = paths.map((p) => p.replace(/\u200b/g, "").trim());
    expect(normalized).toContain("/v1/runs");
    expect(normalized).toContain("/c/{pk}/v1/device/code");
    expect(normalized.length).toBeGreaterThanOrEqual(21);
    expect(await page.getByText("serve_in_app").count()).toBeGreaterThan(0);
    expect(foreign).toEqual([]);
    expect(failed).toEqual([]);
  });
});
