import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { ROOT } from "./process.js";

/**
 * Packs `@svc/sdk` as `npm pack` in sdk/ does (its `prepack` builds dist/), from a copy,
 * so the build never touches the working tree's sdk/dist, which other suites may be
 * building at the same time. The copy sees the root's node_modules, as sdk/ does.
 * Returns the tarball's path.
 */
export function packSdk(dest: string): string {
  const stage = path.join(dest, "stage");
  fs.cpSync(path.join(ROOT, "sdk"), path.join(stage, "sdk"), { recursive: true, filter: (src) => !/[/\\](dist|build|node_modules)$/.test(src) });
  fs.symlinkSync(path.join(ROOT, "node_modules"), path.join(stage, "node_modules"), "dir");
  const env = { ...process.env, PATH: `${path.join(ROOT, "node_modules/.bin")}${path.delimiter}${process.env.PATH}` };
  let stdout: string;
  try {
    stdout = execFileSync("npm", ["pack", "--json", "--pack-destination", dest], { cwd: path.join(stage, "sdk"), env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const { stdout, stderr } = err as { stdout: string; stderr: string };
    throw new Error(`npm pack of the SDK failed:\n${stdout}\n${stderr}`);
  }
  const report = JSON.parse(stdout.slice(stdout.lastIndexOf("\n[") + 1)) as { filename: string }[];
  return path.join(dest, report[0].filename);
}

/** An empty ES-module project in `dir` with the tarball and `extra` packages installed from the registry, nothing else. */
export function installInto(dir: string, tarball: string, extra: string[] = []): void {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "empty-app", version: "1.0.0", private: true, type: "module" }));
  try {
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball, ...extra], { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const { stdout, stderr } = err as { stdout: string; stderr: string };
    throw new Error(`npm install in ${dir} failed:\n${stdout}\n${stderr}`);
  }
}
