import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The repository's root: the folder whose package.json is the service's own. Found by
 * walking up from this module, so it is the same whether the code runs from its sources
 * (`server/paths.ts`) or from the production build (`dist/server/main.js`, one bundle).
 * Every file the service reads at run time (migrations, SQL functions, hosted pages, the
 * dashboard and worker builds) is named from here, never from a module's own location.
 */
function findRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    try {
      if ((JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { name?: string }).name === "svc") return dir;
    } catch {
      // no package.json here, or not JSON: keep walking up
    }
    if (path.dirname(dir) === dir) throw new Error(`svc: no package.json named "svc" above ${from}`);
  }
}

export const ROOT = findRoot(path.dirname(fileURLToPath(import.meta.url)));
export const fromRoot = (...parts: string[]) => path.join(ROOT, ...parts);
