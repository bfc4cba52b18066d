import fs from "node:fs";
import path from "node:path";
import type { AgentProcess } from "../runtimes/runtime.js";
import { parseModelApi, type ModelApi } from "./network.js";
import type { Policy } from "./schema.js";

/**
 * What one agent CLI may touch, whichever sandbox enforces it: the same list
 * becomes bubblewrap mounts on Linux and a Seatbelt profile on macOS.
 */
export interface Confinement {
  /** The CLI, resolved to an absolute path on the worker's PATH. */
  command: string;
  /** The real HOME: the CLI keeps finding its login there, but sees only what is listed of it. */
  home: string;
  /** The working folder: read-write. */
  cwd: string;
  /** Read-only: the CLI's installation, Node's, the runtime's and the user's readable paths. */
  readable: string[];
  /** Read-write besides the working folder: the runtime's state and bridge folders, the user's writable paths. */
  writable: string[];
  /** `policy.sandbox.network`: the whole network, or only the model APIs. */
  network: boolean;
  apis: ModelApi[];
}

/** Finds a command the way a shell would, on the PATH the CLI gets. */
export function which(command: string, pathVar: string | undefined): string | undefined {
  if (command.includes("/")) return path.resolve(command);
  for (const dir of (pathVar ?? "").split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

const within = (child: string, parent: string) => child === parent || child.startsWith(parent.endsWith("/") ? parent : parent + "/");

/**
 * The folder a program is installed in, to be made readable: for an npm
 * package the outermost `node_modules` above its real path (Codex's launcher
 * starts a binary from a sibling package; pnpm nests packages), otherwise the
 * folder of the real file, or the file alone when that folder is HOME itself
 * or holds it (a binary dropped straight into HOME must not expose HOME).
 */
export function installRoot(file: string, home: string): string {
  const real = fs.realpathSync(file);
  const parts = real.split("/");
  const top = parts.indexOf("node_modules");
  const root = top > 0 ? parts.slice(0, top + 1).join("/") : path.dirname(real);
  return root === "/" || within(home, root) ? real : root;
}

/** Node's own installation (the MCP bridge and the forwarder run on `process.execPath`): its prefix when it sits in a `bin` folder. */
export function nodeInstall(home: string): string {
  const real = fs.realpathSync(process.execPath);
  const bin = path.dirname(real);
  const prefix = path.basename(bin) === "bin" ? path.dirname(bin) : bin;
  return prefix === "/" || within(home, prefix) ? real : prefix;
}

export function confinementOf(p: AgentProcess, policy: Policy, env: NodeJS.ProcessEnv): Confinement {
  const home = env.HOME;
  if (!home || !path.isAbsolute(home)) throw new Error("The agent CLI needs an absolute HOME to be sandboxed, and the worker has none.");
  const cwd = path.resolve(p.cwd);
  // The working folder is writable whole: HOME itself (or a folder holding it) would hand over ~/.ssh and every login.
  if (within(home, cwd)) throw new Error(`The working folder ${cwd} is HOME or holds it: agent CLIs need a folder of their own (a project folder).`);
  const command = which(p.command, env.PATH);
  if (!command) throw new Error(`The agent CLI ${p.command} is not on the PATH.`);
  const absolute = (paths: string[], what: string) =>
    paths.map((entry) => {
      if (!path.isAbsolute(entry)) throw new Error(`The sandbox's ${what} paths must be absolute: ${entry}`);
      return path.normalize(entry);
    });
  return {
    command,
    home,
    cwd,
    // What the CLI and its runtime need to read is already there when it lies in the working folder: mounted
    // again read-only, it would lock the project's own node_modules (a `claude` from its devDependencies).
    readable: [...[installRoot(command, home), nodeInstall(home), ...absolute(p.readable ?? [], "readable")].filter((r) => !within(r, cwd)), ...absolute(policy.sandbox.readable, "readable")],
    writable: [...absolute(p.writable ?? [], "writable"), ...absolute(policy.sandbox.writable, "writable")],
    network: policy.sandbox.network,
    apis: (p.modelApis ?? []).map(parseModelApi),
  };
}
