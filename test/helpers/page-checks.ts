import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import type { Browser, BrowserContext, Page } from "playwright-core";

const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");
/** Screenshots of the dashboard's pages, kept as test artifacts (gitignored). */
export const SHOTS = path.resolve("test-artifacts/dashboard");

/** A page with what went wrong in it recorded: console errors and warnings, uncaught errors, requests to other hosts. */
export interface Watched {
  page: Page;
  consoleErrors: string[];
  pageErrors: string[];
  foreign: string[];
}

/** Watches `page` (of a server at `baseUrl`) for console errors, uncaught errors and requests leaving the host. */
export function watch(page: Page, baseUrl: string): Watched {
  const watched: Watched = { page, consoleErrors: [], pageErrors: [], foreign: [] };
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") watched.consoleErrors.push(`${m.type()}: ${m.text()} @ ${m.location().url}`);
  });
  page.on("pageerror", (e) => watched.pageErrors.push(String(e)));
  page.on("request", (r) => {
    if (!r.url().startsWith(baseUrl) && !r.url().startsWith("data:")) watched.foreign.push(r.url());
  });
  return watched;
}

/** A new browser context at a desktop (height 900) or phone (height 844) width. */
export function contextAt(browser: Browser, width: number): Promise<BrowserContext> {
  fs.mkdirSync(SHOTS, { recursive: true });
  return browser.newContext({ viewport: { width, height: width < 600 ? 844 : 900 } });
}

/** Opens `url` of `baseUrl` in a new context of `width`, watched. */
export async function openWatched(browser: Browser, baseUrl: string, width: number, url: string): Promise<Watched> {
  const page = await (await contextAt(browser, width)).newPage();
  const watched = watch(page, baseUrl);
  await page.goto(`${baseUrl}${url}`);
  return watched;
}

/** axe-core's serious and critical violations on the page, one line each (empty: none). */
export async function axeViolations(page: Page): Promise<string[]> {
  // addScriptTag would add an inline <script>, which the page's CSP refuses (as it should): evaluated through the DevTools protocol instead.
  await page.evaluate(fs.readFileSync(AXE, "utf8"));
  const results = await page.evaluate(() => (window as unknown as { axe: { run: (ctx: Document, opts: object) => Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: string[] }[] }[] }> } }).axe.run(document, { resultTypes: ["violations"] }));
  return results.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

/** Nothing is wider than the viewport (a phone scrolls only down). */
export function fitsWidth(page: Page): Promise<boolean> {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
}

/** The elements reaching past the viewport's right edge, outermost first (empty: the page fits). */
export function overflowing(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const out: string[] = [];
    for (const el of Array.from(document.body.querySelectorAll("*"))) {
      const r = el.getBoundingClientRect();
      if (r.right <= window.innerWidth + 0.5 || r.width === 0) continue;
      // Inside a scroller of its own (a wide table's box): scrolls there, not the page.
      let scroller: Element | null = el.parentElement;
      while (scroller && getComputedStyle(scroller).overflowX === "visible") scroller = scroller.parentElement;
      if (scroller && scroller !== document.body && scroller !== document.documentElement) continue;
      out.push(`${el.tagName.toLowerCase()}${el.className ? "." + String(el.className).split(" ").join(".") : ""} (${Math.round(r.right)} px)`);
    }
    return out.slice(0, 5);
  });
}
