import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import type { Router } from "express";
import type { Logger } from "../logger.js";
import { ROOT } from "../paths.js";
import { currentOrBuilt, describeFile, filesPresent, hashInputs, readJson, readVerified, writeAtomically, type ReleaseFile } from "./release-files.js";
import { releaseRouter } from "./release-router.js";

/**
 * The SDK this service hands app developers, as the npm package `npm pack` makes of
 * `sdk/` (its `prepack` builds `dist/`): served at `/sdk/svc-sdk-<version>.tgz`, so
 * `npm install <base URL>/sdk/svc-sdk.tgz` installs the SDK of exactly this service's
 * version with no registry name (the scope is not claimed on the public registry).
 * Built on its first download from a copy of `sdk/` (the working tree's `sdk/dist`
 * is never touched), kept in `sdk/release/` (gitignored) with a manifest of what it
 * was built from, rebuilt when that changes.
 */

const execFileAsync = promisify(execFile);
const SDK = path.join(ROOT, "sdk");

/** Where the built package is kept. */
export const SDK_RELEASE_DIR = path.join(SDK, "release");
/** Where the service serves it. */
export const SDK_DOWNLOADS_PATH = "/sdk";

const SOURCE_INPUTS = ["sdk/package.json", "sdk/LICENSE", "sdk/README.md", "sdk/scripts", "sdk/src", "sdk/tsconfig.build.json", "contract/package.json", "contract/src", "package-lock.json", "server/downloads/sdk-release.ts"];

export const sdkVersion = (): string => readJson<{ version: string }>(path.join(SDK, "package.json")).version;
export const sdkFile = (version: string) => `svc-sdk-${version}.tgz`;

interface SdkManifest {
  version: string;
  sourceHash: string;
  package: ReleaseFile;
  builtAt: string;
}

function currentManifest(dir: string): SdkManifest | null {
  let manifest: SdkManifest;
  try {
    manifest = readJson<SdkManifest>(path.join(dir, "manifest.json"));
  } catch {
    return null;
  }
  if (manifest.version !== sdkVersion() || manifest.sourceHash !== hashInputs(SOURCE_INPUTS)) return null;
  return filesPresent(dir, [manifest.package]) ? manifest : null;
}

/** Packs the SDK from a copy of `sdk/` that sees the root's node_modules (as `sdk/` does) into `dir`. */
async function buildSdkRelease(dir: string): Promise<SdkManifest> {
  const hash = hashInputs(SOURCE_INPUTS);
  const version = sdkVersion();
  const stage = fs.mkdtempSync(path.join(os.tmpdir(), "svc-sdk-build-"));
  try {
    const copy = path.join(stage, "sdk");
    fs.cpSync(SDK, copy, { recursive: true, filter: (src) => !/[/\\](dist|build|release|node_modules)$/.test(src) });
    fs.symlinkSync(path.join(ROOT, "node_modules"), path.join(stage, "node_modules"), "dir");
    const out = path.join(stage, "packed");
    fs.mkdirSync(out);
    const npm = process.env.npm_execpath && /npm-cli\.js$/.test(process.env.npm_execpath) ? ([process.execPath, [process.env.npm_execpath]] as const) : (["npm", []] as const);
    const env = { ...process.env, npm_config_update_notifier: "false", PATH: `${path.join(ROOT, "node_modules/.bin")}${path.delimiter}${process.env.PATH}` };
    const { stdout } = await execFileAsync(npm[0], [...npm[1], "pack", "--json", "--pack-destination", out], { cwd: copy, env, maxBuffer: 64 * 1024 * 1024 });
    // `--json` prints the report last; the prepack's own output may come before it.
    const report = JSON.parse(stdout.slice(stdout.lastIndexOf("\n[") + 1)) as { filename: string }[];
    const tarball = fs.readFileSync(path.join(out, report[0].filename));
    const name = sdkFile(version);
    fs.mkdirSync(dir, { recursive: true });
    for (const old of fs.readdirSync(dir)) if (old.startsWith("svc-sdk-") && old !== name) fs.rmSync(path.join(dir, old), { force: true });
    writeAtomically(path.join(dir, name), tarball);
    const manifest: SdkManifest = { version, sourceHash: hash, package: describeFile(name, tarball), builtAt: new Date().toISOString() };
    writeAtomically(path.join(dir, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    return manifest;
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

/** The URL of the SDK this service serves, under its public base URL. */
export const sdkPackageUrl = (base: string) => `${base}${SDK_DOWNLOADS_PATH}/${sdkFile(sdkVersion())}`;

/** `GET /sdk/svc-sdk-<version>.tgz`, and `/sdk/svc-sdk.tgz` redirecting to it. */
export function sdkDownloadsRouter(log: Logger, dir = SDK_RELEASE_DIR): { router: Router; paths: string[] } {
  const load = async () => {
    const manifest = await currentOrBuilt(dir, () => currentManifest(dir), () => buildSdkRelease(dir));
    return { file: manifest.package, bytes: readVerified(dir, manifest.package) };
  };
  return releaseRouter(log, "The SDK's package", load, [{ path: `${SDK_DOWNLOADS_PATH}/${sdkFile(sdkVersion())}`, latest: `${SDK_DOWNLOADS_PATH}/svc-sdk.tgz`, type: "application/gzip", pick: (l) => l }]);
}
