import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * How this worker runs, and so where its helper scripts are. Three ways:
 *
 * - `sources`: inside the repository, the TypeScript sources through tsx;
 * - `package`: installed from its npm package (the tarball the service serves,
 *   or `npm pack` in worker/), the compiled `dist/`;
 * - `single-file`: the one-file build (`svc-worker-<version>.mjs`) run with
 *   plain `node`: the helpers are that same file, started with `HELPER_FLAG`.
 *
 * This module sits at the top of `src/` (and so of `dist/`, and inside every
 * bundled entry of `dist/`), so its own folder is the code's root in each case.
 */
declare const __SVC_WORKER_SINGLE_FILE__: boolean | undefined;
declare const __SVC_WORKER_VERSION__: string | undefined;

const here = fileURLToPath(import.meta.url);
/** `src/` in the repository, `dist/` in the package, the folder of the single file. */
const codeRoot = path.dirname(here);

export type RunsFrom = "sources" | "package" | "single-file";
export const RUNS_FROM: RunsFrom = typeof __SVC_WORKER_SINGLE_FILE__ !== "undefined" && __SVC_WORKER_SINGLE_FILE__ ? "single-file" : here.endsWith(".ts") ? "sources" : "package";

/** The first argument that makes the single file run one of its helpers instead of the CLI. */
export const HELPER_FLAG = "--svc-worker-helper";

/** The worker's version: its package.json's (the single-file build has it written in). */
export const PACKAGE_VERSION: string =
  typeof __SVC_WORKER_VERSION__ === "string" ? __SVC_WORKER_VERSION__ : (JSON.parse(fs.readFileSync(path.join(codeRoot, "..", "package.json"), "utf8")) as { version: string }).version;

/** The helper scripts the worker starts as separate processes on `process.execPath`. */
export type Helper = "mcp-bridge" | "forwarder";

const FILES: Record<Helper, { sources: string; package: string }> = {
  // The MCP server an agent CLI starts for the app's tools.
  "mcp-bridge": { sources: "mcp/bridge-server.ts", package: "mcp/bridge-server.js" },
  // Plain JavaScript that runs on bare node inside the sandbox (no tsx there): the same file in both.
  forwarder: { sources: "policy/forwarder.mjs", package: "policy/forwarder.mjs" },
};

/**
 * How to start a helper: the arguments after `process.execPath` (the helper's own
 * arguments go after them), and the one file it runs, which a sandbox must let
 * the process read.
 */
export function helperCommand(helper: Helper): { args: string[]; file: string } {
  if (RUNS_FROM === "single-file") return { args: [here, `${HELPER_FLAG}=${helper}`], file: here };
  const file = path.join(codeRoot, FILES[helper][RUNS_FROM]);
  // tsx only for TypeScript: the forwarder is JavaScript and runs where tsx is not mounted.
  const loader = RUNS_FROM === "sources" && file.endsWith(".ts") ? ["--conditions=svc-source", "--import", import.meta.resolve("tsx")] : [];
  return { args: [...loader, file], file };
}

/**
 * What a sandboxed process needs to read to run a helper besides Node itself:
 * the worker's own folder and the `node_modules` its packages come from, or just
 * the single file.
 */
export function helperReadable(): string[] {
  if (RUNS_FROM === "single-file") return [here];
  const sdkPath = fileURLToPath(import.meta.resolve("@modelcontextprotocol/sdk/server/index.js"));
  const marker = `${path.sep}node_modules${path.sep}`;
  const packagesRoot = sdkPath.slice(0, sdkPath.lastIndexOf(marker) + marker.length - 1);
  return [path.dirname(codeRoot), packagesRoot];
}
