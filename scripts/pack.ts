/**
 * `npm run pack [-- --only sdk,worker] [-- --out <dir>]`: builds and packs the publishable
 * workspace packages into `dist-packages/` (gitignored), each through its own
 * `prepack` (its build), as `npm publish` would. Prints each tarball with its size and
 * exits non-zero when any package failed to build or pack.
 */
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
/** In dependency order: the SDK bundles the contract's sources, the worker depends on the contract. */
export const PACKAGES = ["sdk", "contract", "worker"] as const;

export interface Packed {
  pkg: string;
  tarball: string;
  bytes: number;
}

/** Packs one workspace package (running its `prepack`) into `out`; returns the tarball's path. */
export function packOne(pkg: string, out: string): Packed {
  fs.mkdirSync(out, { recursive: true });
  const stdout = execFileSync("npm", ["pack", "--json", "--pack-destination", out], {
    cwd: path.join(ROOT, pkg),
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    maxBuffer: 64 * 1024 * 1024,
  });
  // `--json` prints the report last; a prepack's own output may come before it.
  const report = JSON.parse(stdout.slice(stdout.lastIndexOf("\n[") + 1)) as { filename: string }[];
  const tarball = path.join(out, report[0].filename);
  return { pkg, tarball, bytes: fs.statSync(tarball).size };
}

function main(): void {
  const args = process.argv.slice(2);
  const flag = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const out = path.resolve(flag("--out") ?? path.join(ROOT, "dist-packages"));
  const only = flag("--only")?.split(",");
  const failed: string[] = [];
  for (const pkg of PACKAGES.filter((p) => !only || only.includes(p))) {
    try {
      const { tarball, bytes } = packOne(pkg, out);
      console.log(`${pkg}: ${path.relative(process.cwd(), tarball)} (${(bytes / 1024).toFixed(1)} KiB)`);
    } catch (err) {
      const { stdout, stderr, message } = err as { stdout?: string; stderr?: string; message: string };
      console.error(`${pkg}: failed to build or pack\n${stderr || stdout || message}`);
      failed.push(pkg);
    }
  }
  if (failed.length) {
    console.error(`not packed: ${failed.join(", ")}`);
    process.exitCode = 1;
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
