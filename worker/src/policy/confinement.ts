import fs from "node:fs";
import path from "node:path";
import type { AgentProcess } from "../runtimes/runtime.js";
import { parseModelApi, type ModelApi } from "./network.js";
import type { Policy } from "./schema.js";
import { interpreterInstall, launchableOf, which } from "./launchable.js";

/**
 * What one agent CLI may touch, whichever sandbox enforces it: the same list
 * becomes bubblewrap mounts on Linux and a Seatbelt profile on macOS.
 */
export interface Confinement {
  /** The program started: the CLI's real file (links on PATH resolved), or its script's interpreter (`launchable.ts`). */
  command: string;
  /** Its arguments before the job's own: an interpreter's options and the CLI's script. */
  prefix: string[];
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

const within = (child: string, parent: string) => child === parent || child.startsWith(parent.endsWith("/") ? parent : parent + "/");

export function confinementOf(p: AgentProcess, policy: Policy, env: NodeJS.ProcessEnv): Confinement {
  const home = env.HOME;
  if (!home || !path.isAbsolute(home)) throw new Error("The agent CLI needs an absolute HOME to be sandboxed, and the worker has none.");
  const cwd = path.resolve(p.cwd);
  // The working folder is writable whole: HOME itself (or a folder holding it) would hand over ~/.ssh and every login.
  if (within(home, cwd)) throw new Error(`The working folder ${cwd} is HOME or holds it: agent CLIs need a folder of their own (a project folder).`);
  const found = which(p.command, env.PATH);
  if (!found || !fs.existsSync(found)) throw new Error(`The agent CLI ${p.command} is not on the PATH.`);
  const cli = launchableOf(found, env, home);
  const absolute = (paths: string[], what: string) =>
    paths.map((entry) => {
      if (!path.isAbsolute(entry)) throw new Error(`The sandbox's ${what} paths must be absolute: ${entry}`);
      return path.normalize(entry);
    });
  return {
    command: cli.command,
    prefix: cli.prefix,
    home,
    cwd,
    // What the CLI and its runtime need to read is already there when it lies in the working folder: mounted
    // again read-only, it would lock the project's own node_modules (a `claude` from its devDependencies).
    // The worker's own Node too: the MCP bridge and the forwarder run on it.
    readable: [...[...cli.readable, interpreterInstall(process.execPath, home), ...absolute(p.readable ?? [], "readable")].filter((r) => !within(r, cwd)), ...absolute(policy.sandbox.readable, "readable")],
    writable: [...absolute(p.writable ?? [], "writable"), ...absolute(policy.sandbox.writable, "writable")],
    network: policy.sandbox.network,
    apis: (p.modelApis ?? []).map(parseModelApi),
  };
}
