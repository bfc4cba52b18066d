import fs from "node:fs";
import path from "node:path";
import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { ROOT } from "./process.js";

const execFileAsync = promisify(execFile);

/** A copy of sdk/ in `dest` to pack from (it sees the root's node_modules, as sdk/ does), and the `npm pack` to run in it. */
function stageSdk(dest: string) {
  const stage = path.join(dest, "stage");
  fs.cpSync(path.join(ROOT, "sdk"), path.join(stage, "sdk"), { recursive: true, filter: (src) => !/[/\\](dist|build|node_modules)$/.test(src) });
  fs.symlinkSync(path.join(ROOT, "node_modules"), path.join(stage, "node_modules"), "dir");
  const env = { ...process.env, PATH: `${path.join(ROOT, "node_modules/.bin")}${path.delimiter}${process.env.PATH}` };
  return { args: ["pack", "--json", "--pack-destination", dest], options: { cwd: path.join(stage, "sdk"), env, encoding: "utf8" as const } };
}

/** The tarball `npm pack --json` reported. */
function tarballOf(dest: string, stdout: string): string {
  const report = JSON.parse(stdout.slice(stdout.lastIndexOf("\n[") + 1)) as { filename: string }[];
  return path.join(dest, report[0].filename);
}

function failed(what: string, err: unknown): Error {
  const { stdout, stderr } = err as { stdout?: string; stderr?: string };
  return new Error(`${what} failed:\n${stdout ?? ""}\n${stderr ?? String(err)}`);
}

/**
 * Packs `@svc/sdk` as `npm pack` in sdk/ does (its `prepack` builds dist/), from a copy,
 * so the build never touches the working tree's sdk/dist, which other suites may be
 * building at the same time. The copy sees the root's node_modules, as sdk/ does.
 * Returns the tarball's path.
 */
export function packSdk(dest: string): string {
  const { args, options } = stageSdk(dest);
  let stdout: string;
  try {
    stdout = execFileSync("npm", args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    throw failed("npm pack of the SDK", err);
  }
  return tarballOf(dest, stdout);
}

/** `packSdk` without blocking the test's process meanwhile (a suite that has other things to do while it builds). */
export async function packSdkAsync(dest: string): Promise<string> {
  const { args, options } = stageSdk(dest);
  const { stdout } = await execFileAsync("npm", args, options).catch((err: unknown) => {
    throw failed("npm pack of the SDK", err);
  });
  return tarballOf(dest, stdout);
}

function emptyApp(dir: string, tarball: string, extra: string[]) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "empty-app", version: "1.0.0", private: true, type: "module" }));
  return { args: ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball, ...extra], options: { cwd: dir, encoding: "utf8" as const } };
}

/** An empty ES-module project in `dir` with the tarball and `extra` packages installed from the registry, nothing else. */
export function installInto(dir: string, tarball: string, extra: string[] = []): void {
  const { args, options } = emptyApp(dir, tarball, extra);
  try {
    execFileSync("npm", args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    throw failed(`npm install in ${dir}`, err);
  }
}

/** `installInto` without blocking the test's process meanwhile. */
export async function installIntoAsync(dir: string, tarball: string, extra: string[] = []): Promise<void> {
  const { args, options } = emptyApp(dir, tarball, extra);
  await execFileAsync("npm", args, options).catch((err: unknown) => {
    throw failed(`npm install in ${dir}`, err);
  });
}
