import fs from "node:fs";
import { chromium, type Browser } from "playwright-core";

/** Debian's Chromium (installed by .ci/run), driven by playwright-core. */
export const CHROMIUM = "/usr/bin/chromium";
export const chromiumAvailable = fs.existsSync(CHROMIUM);

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
}
