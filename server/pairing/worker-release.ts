import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { ROOT } from "../paths.js";
import { currentOrBuilt, describeFile, filesPresent, hashInputs, readJson, readVerified, writeAtomically, type ReleaseFile } from "../downloads/release-files.js";

export type { ReleaseFile } from "../downloads/release-files.js";

/**
 * The worker this service hands its end users, built from `worker/` (and the
 * contract it speaks) into two files, served at `/worker/...` (worker-downloads.ts):
 *
 * - `svc-worker-<version>.tgz`: an npm package, for `npx <url>`. Its own code and
 *   `@svc/contract` are bundled into `dist/` (esbuild, one file per entry); every
 *   other dependency is an ordinary one from the public npm registry.
 * - `svc-worker-<version>.mjs`: the whole worker in one file, every dependency
 *   included, for plain `node`.
 *
 * Built by the root `postinstall` (`npm run build:worker`), so a fresh clone's
 * `npm install` leaves them ready; a server that finds them missing or built
 * from other sources (a version bump, an edited worker) builds them again on the
 * first download, once, under a lock shared with other instances on the folder.
 */

const execFileAsync = promisify(execFile);
const WORKER = path.join(ROOT, "worker");
const CONTRACT = path.join(ROOT, "contract");

/** Where the built files are kept (gitignored). */
export const RELEASE_DIR = path.join(WORKER, "release");
export const WORKER_PACKAGE = "svc-worker";

interface PackageJson {
  name: string;
  version: string;
  description?: string;
  type?: string;
  license?: string;
  bin?: Record<string, string>;
  engines?: Record<string, string>;
  dependencies?: Record<string, string>;
}

/** The version of the worker this service speaks: worker/package.json's. */
export function workerVersion(): string {
  return readJson<PackageJson>(path.join(WORKER, "package.json")).version;
}

/** The file names of a version, fixed by it alone (nothing from a request ever reaches a path). */
export const releaseFiles = (version: string) => ({ package: `${WORKER_PACKAGE}-${version}.tgz`, singleFile: `${WORKER_PACKAGE}-${version}.mjs` });

export interface ReleaseManifest {
  version: string;
  /** A hash of everything the files are built from: sources, package.json files, the lockfile, this builder. */
  sourceHash: string;
  package: ReleaseFile;
  singleFile: ReleaseFile;
  builtAt: string;
}

const SOURCE_INPUTS = ["worker/package.json", "worker/LICENSE", "worker/bin", "worker/src", "worker/single-file.mjs", "contract/package.json", "contract/src", "package-lock.json", "server/pairing/worker-release.ts"];

/** The hash the manifest must carry for its files to be this tree's build. */
export function sourceHash(): string {
  return hashInputs(SOURCE_INPUTS);
}

/** Bare package names a bundle leaves to `node_modules`, from esbuild's metafile. */
function externalPackages(metafile: import("esbuild").Metafile): Set<string> {
  const names = new Set<string>();
  for (const output of Object.values(metafile.outputs)) {
    for (const imp of output.imports) {
      if (!imp.external || imp.path.startsWith("node:") || imp.path.startsWith(".")) continue;
      const parts = imp.path.split("/");
      names.add(imp.path.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0]);
    }
  }
  return names;
}

/** Builds both files into `dir` (default `worker/release/`) and returns their manifest. */
export async function buildWorkerRelease(dir = RELEASE_DIR): Promise<ReleaseManifest> {
  const esbuild = await import("esbuild");
  const { builtinModules } = await import("node:module");
  const hash = sourceHash();
  const pkg = readJson<PackageJson>(path.join(WORKER, "package.json"));
  const contractName = readJson<PackageJson>(path.join(CONTRACT, "package.json")).name;
  const files = releaseFiles(pkg.version);
  const stage = fs.mkdtempSync(path.join(os.tmpdir(), "svc-worker-build-"));
  try {
    const common: import("esbuild").BuildOptions = {
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      // The workspace packages resolve to their TypeScript sources: nothing of theirs needs building first.
      conditions: ["svc-source"],
      absWorkingDir: ROOT,
      metafile: true,
      logLevel: "silent",
      legalComments: "inline",
    };

    // 1. The npm package: the worker's code and the contract bundled, one file per entry (no shared
    //    chunks, so each sits where worker/src/layout.ts expects it); the other dependencies stay imports.
    const own = new Set([contractName]);
    const npmDeps = Object.keys(pkg.dependencies ?? {}).filter((d) => !own.has(d));
    const root = path.join(stage, "package");
    const built = await esbuild.build({
      ...common,
      entryPoints: { main: "worker/src/main.ts", index: "worker/src/index.ts", "mcp/bridge-server": "worker/src/mcp/bridge-server.ts" },
      outdir: path.join(root, "dist"),
      external: npmDeps.flatMap((d) => [d, `${d}/*`]),
    });
    // Every import left in the code must be a dependency the package declares (or Node's own).
    const undeclared = [...externalPackages(built.metafile!)].filter((d) => !npmDeps.includes(d) && !builtinModules.includes(d));
    if (undeclared.length) throw new Error(`the worker package imports ${undeclared.join(", ")}, not in worker/package.json's dependencies`);
    fs.mkdirSync(path.join(root, "dist", "policy"), { recursive: true });
    fs.copyFileSync(path.join(WORKER, "src/policy/forwarder.mjs"), path.join(root, "dist/policy/forwarder.mjs"));
    fs.mkdirSync(path.join(root, "bin"));
    fs.copyFileSync(path.join(WORKER, "bin/svc-worker.js"), path.join(root, "bin/svc-worker.js"));
    fs.chmodSync(path.join(root, "bin/svc-worker.js"), 0o755);
    fs.copyFileSync(path.join(WORKER, "LICENSE"), path.join(root, "LICENSE"));
    // Each dependency at exactly the version this tree installed (and its tests ran on), from the lockfile.
    const lock = readJson<{ packages: Record<string, { version?: string }> }>(path.join(ROOT, "package-lock.json"));
    const pinned = (d: string) => lock.packages[`worker/node_modules/${d}`]?.version ?? lock.packages[`node_modules/${d}`]?.version ?? pkg.dependencies![d];
    const manifest = {
      name: pkg.name,
      version: pkg.version,
      description: pkg.description,
      type: pkg.type,
      license: pkg.license,
      bin: pkg.bin,
      exports: { ".": "./dist/index.js" },
      files: ["bin", "dist"],
      engines: pkg.engines,
      dependencies: Object.fromEntries(npmDeps.map((d) => [d, pinned(d)])),
    };
    fs.writeFileSync(path.join(root, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    // npm's own packer: the layout and metadata npm expects, and fixed timestamps (the same sources give the same bytes).
    const packed = path.join(stage, "packed");
    fs.mkdirSync(packed);
    const npm = process.env.npm_execpath && /npm-cli\.js$/.test(process.env.npm_execpath) ? [process.execPath, [process.env.npm_execpath]] as const : ["npm", []] as const;
    await execFileAsync(npm[0], [...npm[1], "pack", "--pack-destination", packed, "--ignore-scripts", "--silent"], { cwd: root, env: { ...process.env, npm_config_update_notifier: "false" } });
    const tarball = fs.readFileSync(path.join(packed, files.package));

    // 2. The single file: everything in it. ws's optional native helpers are left out (it runs without them);
    //    CommonJS modules inside an ES module need a `require`.
    const single = path.join(stage, files.singleFile);
    await esbuild.build({
      ...common,
      entryPoints: ["worker/single-file.mjs"],
      outfile: single,
      define: { __SVC_WORKER_SINGLE_FILE__: "true", __SVC_WORKER_VERSION__: JSON.stringify(pkg.version) },
      external: ["bufferutil", "utf-8-validate"],
      banner: { js: `// ${pkg.name} ${pkg.version}: the whole worker in one file. Run it with node (>= 20).\nimport { createRequire as __svcCreateRequire } from "node:module";\nconst require = __svcCreateRequire(import.meta.url);` },
    });
    const script = fs.readFileSync(single);

    fs.mkdirSync(dir, { recursive: true });
    // Only the current version is kept: a server serves its own version alone.
    for (const old of fs.readdirSync(dir)) if (old.startsWith(`${WORKER_PACKAGE}-`) && !Object.values(files).includes(old)) fs.rmSync(path.join(dir, old), { force: true });
    writeAtomically(path.join(dir, files.package), tarball);
    writeAtomically(path.join(dir, files.singleFile), script);
    const result: ReleaseManifest = { version: pkg.version, sourceHash: hash, package: describeFile(files.package, tarball), singleFile: describeFile(files.singleFile, script), builtAt: new Date().toISOString() };
    // The manifest last: it vouches for the files beside it.
    writeAtomically(path.join(dir, "manifest.json"), `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

/** The manifest in `dir` when it is this tree's build and its files are there as it says. */
export function currentManifest(dir = RELEASE_DIR): ReleaseManifest | null {
  let manifest: ReleaseManifest;
  try {
    manifest = readJson<ReleaseManifest>(path.join(dir, "manifest.json"));
  } catch {
    return null;
  }
  if (manifest.version !== workerVersion() || manifest.sourceHash !== sourceHash()) return null;
  return filesPresent(dir, [manifest.package, manifest.singleFile]) ? manifest : null;
}

export interface LoadedRelease {
  manifest: ReleaseManifest;
  package: Buffer;
  singleFile: Buffer;
}

/**
 * The current build, read into memory (both files are served from there): as
 * found, or built now when missing or stale. One build at a time across the
 * processes sharing the folder; one that waited finds the other's build.
 */
export async function loadWorkerRelease(dir = RELEASE_DIR): Promise<LoadedRelease> {
  const manifest = await currentOrBuilt(dir, () => currentManifest(dir), () => buildWorkerRelease(dir));
  return { manifest, package: readVerified(dir, manifest.package), singleFile: readVerified(dir, manifest.singleFile) };
}
