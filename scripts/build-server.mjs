// The production build of the service (`npm run build`, and the root postinstall): the server and
// the `svc` CLI, with the contract they share, bundled by esbuild into dist/server/ as plain
// JavaScript, so `npm start` runs no compiler. npm packages stay imports (node_modules is there).
//
// `--if-stale` (npm's prestart) builds only when the sources differ from the last build's: a fresh
// clone's install has built already, a deployment builds once, an edited tree builds again.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const OUT_DIR = path.join(ROOT, "dist", "server");
const STAMP = path.join(OUT_DIR, "build.json");
const SOURCES = ["server", "contract/src"];
const ENTRIES = { main: "server/main.ts", cli: "server/cli/main.ts" };

/** Every source the bundle is made of, relative to the root, in a fixed order. */
function sourceFiles() {
  const files = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const rel = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(rel);
      else if (/\.(ts|js|mjs|json)$/.test(entry.name)) files.push(rel);
    }
  };
  for (const dir of SOURCES) walk(dir);
  return files;
}

/** A hash of every source (their contents, not their times: a checkout rewrites those) and of the lockfile. */
export function sourceHash() {
  const hash = crypto.createHash("sha256");
  for (const rel of sourceFiles()) hash.update(rel).update("\0").update(fs.readFileSync(path.join(ROOT, rel))).update("\0");
  hash.update(fs.readFileSync(path.join(ROOT, "package-lock.json")));
  return hash.digest("hex");
}

/** The newest modification time among the sources and the lockfile (a stat of each: cheap next to reading them). */
function newestSource() {
  return Math.max(...[...sourceFiles(), "package-lock.json"].map((rel) => fs.statSync(path.join(ROOT, rel)).mtimeMs));
}

export function isFresh() {
  try {
    if (!Object.keys(ENTRIES).every((name) => fs.existsSync(path.join(OUT_DIR, `${name}.js`)))) return false;
    // Nothing touched since the build: fresh, without reading a file. Something touched (an edit, a
    // checkout that rewrote files unchanged): the contents decide.
    if (newestSource() < fs.statSync(STAMP).mtimeMs) return true;
    if (JSON.parse(fs.readFileSync(STAMP, "utf8")).sourceHash !== sourceHash()) return false;
    const now = new Date();
    fs.utimesSync(STAMP, now, now); // the same contents: the next check needs no reading
    return true;
  } catch {
    return false;
  }
}

export async function buildServer() {
  const started = Date.now();
  const esbuild = await import("esbuild");
  const hash = sourceHash();
  fs.rmSync(OUT_DIR, { recursive: true, force: true });
  await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: ENTRIES,
    outdir: OUT_DIR,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node22",
    // The workspace packages resolve to their TypeScript sources and are bundled in.
    conditions: ["svc-source"],
    // Every npm package stays an import of node_modules, as it is when the sources run.
    plugins: [{ name: "npm-external", setup: (b) => b.onResolve({ filter: /^[^./]/ }, (a) => (a.path.startsWith("@svc/") || a.kind === "entry-point" ? undefined : { path: a.path, external: true })) }],
    sourcemap: "linked",
    sourcesContent: false,
    legalComments: "none",
    logLevel: "warning",
  });
  fs.writeFileSync(STAMP, `${JSON.stringify({ sourceHash: hash, builtAt: new Date().toISOString() }, null, 2)}\n`);
  return Date.now() - started;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv.includes("--if-stale") && isFresh()) process.exit(0);
  const ms = await buildServer();
  process.stdout.write(`svc: built the server into ${path.relative(ROOT, OUT_DIR)}/ in ${ms} ms\n`);
}
