import fs from "node:fs";
import path from "node:path";

/**
 * What the sandbox starts for an agent CLI found at some path, and what of the
 * disk it needs to see for that: the program the user's shell would really run.
 *
 * The path found on PATH is often a link outside every folder the sandbox
 * mounts (`~/.local/bin/claude` from Anthropic's installer, `~/.npm-global/bin`
 * from npm with a prefix in HOME, a link of the user's in `~/bin`): inside, HOME
 * is an empty tmpfs and the link does not exist. So the launch goes to the real
 * file, and a script's interpreter is started explicitly (`#!/usr/bin/env node`
 * is looked up on the CLI's PATH outside, as the shell would, because inside the
 * first `node` on PATH may be a link that is not there either, or another Node).
 */
export interface Launchable {
  /** The program to start: the CLI's real file, or its script's interpreter. */
  command: string;
  /** Arguments before the job's own: the interpreter's options and the script. */
  prefix: string[];
  /** What must be readable inside: the CLI's install folder and its interpreter's. */
  readable: string[];
}

const within = (child: string, parent: string) => child === parent || child.startsWith(parent.endsWith("/") ? parent : parent + "/");

/** Whether `p` is a file this process may execute (a link followed). */
export function isExecutableFile(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

/** Finds a command the way a shell would, on the PATH the CLI gets. */
export function which(command: string, pathVar: string | undefined): string | undefined {
  if (command.includes("/")) return path.resolve(command);
  for (const dir of (pathVar ?? "").split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/**
 * The folder a program is installed in, to be made readable: for an npm
 * package the outermost `node_modules` above its real path (Codex's launcher
 * starts a binary from a sibling package; pnpm nests packages), otherwise the
 * folder of the real file (the native installer's `versions/` folder), or the
 * file alone when that folder is HOME itself or holds it (a binary dropped
 * straight into HOME must not expose HOME).
 */
export function installRoot(file: string, home: string): string {
  const real = fs.realpathSync(file);
  const parts = real.split("/");
  const top = parts.indexOf("node_modules");
  const root = top > 0 ? parts.slice(0, top + 1).join("/") : path.dirname(real);
  return root === "/" || within(home, root) ? real : root;
}

/**
 * An interpreter's installation (a Node from nvm, `/usr/local`, the worker's own):
 * its prefix when it sits in a `bin` folder, else its folder; the file alone
 * where that would be HOME or hold it.
 */
export function interpreterInstall(file: string, home: string): string {
  const real = fs.realpathSync(file);
  const bin = path.dirname(real);
  const prefix = path.basename(bin) === "bin" ? path.dirname(bin) : bin;
  return prefix === "/" || within(home, prefix) ? real : prefix;
}

/** The `#!` line of a file, split into words; null when it has none. */
export function shebangOf(file: string): string[] | null {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, "r");
    const head = Buffer.alloc(512);
    const n = fs.readSync(fd, head, 0, head.length, 0);
    const text = head.subarray(0, n).toString("utf8");
    if (!text.startsWith("#!")) return null;
    const words = text.slice(2).split(/\r?\n/)[0].trim().split(/\s+/).filter(Boolean);
    return words.length ? words : null;
  } catch {
    return null;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/**
 * Resolves the CLI found at `found` (on `env.PATH`, for its interpreter) into
 * what the sandbox starts. Throws, saying what is missing, when the interpreter
 * a script names cannot be found.
 */
export function launchableOf(found: string, env: NodeJS.ProcessEnv, home: string): Launchable {
  const real = fs.realpathSync(found);
  const readable = [installRoot(real, home)];
  const words = shebangOf(real);
  if (!words) return { command: real, prefix: [], readable };
  let [interpreter, ...options] = words;
  if (path.basename(interpreter) === "env") {
    // `#!/usr/bin/env node`, `#!/usr/bin/env -S node --flag`: the first word that is not an option of env's is the program.
    while (options[0]?.startsWith("-")) options = options.slice(1);
    const program = options.shift();
    const onPath = program ? which(program, env.PATH) : undefined;
    if (!onPath) throw new Error(`The agent CLI is a script for ${program ?? "an interpreter"} (${real}), and ${program ?? "it"} is not on the PATH the CLI gets.`);
    interpreter = onPath;
  }
  if (!fs.existsSync(interpreter)) throw new Error(`The agent CLI is a script for ${interpreter} (${real}), which does not exist.`);
  const interpreterReal = fs.realpathSync(interpreter);
  return { command: interpreterReal, prefix: [...options, real], readable: [...readable, interpreterInstall(interpreterReal, home)] };
}
