// The tools only the tests use (test/tools/package.json: the agent CLIs the worker drives, the
// OpenAI Agents SDK, the Nodes the worker and the SDK are proven on), kept out of the service's
// own install. Installed exactly as test/tools/package-lock.json pins, once per lockfile: by the
// tests' global setup (test/helpers/global-setup.ts) or by `npm run test:tools`.
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const TOOLS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "test", "tools");
/**
 * Where the tests' agent CLIs are installed as users install them, outside every folder the worker's
 * sandbox mounts by itself (so every agent suite goes through the launcher's link resolution):
 * - Claude Code as Anthropic's native installer leaves it: the binary in
 *   `<home>/.local/share/claude/versions/<version>` and `<home>/.local/bin/claude` linking to it;
 * - Codex through a link of the user's own in `<home>/bin`, to the npm package's launcher script
 *   (`#!/usr/bin/env node`), whose native binary sits in a sibling platform package.
 * `TOOLS_BIN` (on the tests' PATH) holds only links to those two (node_modules/.bin would also put a `node` there).
 */
export const TOOLS_HOME = path.join(TOOLS_DIR, "home");
export const TOOLS_BIN = path.join(TOOLS_DIR, "bin");
const BINS = { claude: "@anthropic-ai/claude-code", codex: "@openai/codex" };
/** The agent CLIs as the tests run them: the links a user's PATH reaches. */
export const CLAUDE_BIN = path.join(TOOLS_HOME, ".local", "bin", "claude");
export const CODEX_BIN = path.join(TOOLS_HOME, "bin", "codex");
const STAMP = path.join(TOOLS_DIR, "node_modules", ".svc-installed");

/** A Node of the given major the tests can run the worker and the SDK on, or null where none came (another platform). */
export function testNode(major) {
  const bin = path.join(TOOLS_DIR, "node_modules", `node${major}`, "bin", "node");
  return fs.existsSync(bin) ? bin : null;
}

export function ensureTestTools({ quiet = false } = {}) {
  const lock = fs.readFileSync(path.join(TOOLS_DIR, "package-lock.json"));
  const want = crypto.createHash("sha256").update(lock).update(fs.readFileSync(path.join(TOOLS_DIR, "package.json"))).digest("hex");
  const have = fs.existsSync(STAMP) ? fs.readFileSync(STAMP, "utf8") : null;
  if (have !== want) {
    if (!quiet) process.stdout.write("Installing the test tools (test/tools: agent CLIs, Agents SDK, Node 20/22/24)...\n");
    const npm = process.env.npm_execpath && /npm-cli\.js$/.test(process.env.npm_execpath) ? [process.execPath, [process.env.npm_execpath]] : ["npm", []];
    execFileSync(npm[0], [...npm[1], "ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: TOOLS_DIR, stdio: quiet ? "ignore" : ["ignore", "inherit", "inherit"] });
    fs.writeFileSync(STAMP, want);
  }
  const binOf = (name) => {
    const pkg = BINS[name];
    const manifest = JSON.parse(fs.readFileSync(path.join(TOOLS_DIR, "node_modules", pkg, "package.json"), "utf8"));
    return { file: path.join(TOOLS_DIR, "node_modules", pkg, typeof manifest.bin === "string" ? manifest.bin : manifest.bin[name]), version: manifest.version };
  };
  const link = (target, at) => {
    fs.mkdirSync(path.dirname(at), { recursive: true });
    fs.rmSync(at, { force: true });
    fs.symlinkSync(target, at);
  };
  // Claude Code's native binary (the npm package's bin is the same binary) where the native installer puts it: a hard link, no copy.
  const claude = binOf("claude");
  const version = path.join(TOOLS_HOME, ".local", "share", "claude", "versions", claude.version);
  fs.mkdirSync(path.dirname(version), { recursive: true });
  if (!fs.existsSync(version) || fs.statSync(version).ino !== fs.statSync(claude.file).ino) {
    fs.rmSync(version, { force: true });
    fs.linkSync(claude.file, version);
  }
  link(path.join("..", "share", "claude", "versions", claude.version), CLAUDE_BIN);
  link(binOf("codex").file, CODEX_BIN);
  link(CLAUDE_BIN, path.join(TOOLS_BIN, "claude"));
  link(CODEX_BIN, path.join(TOOLS_BIN, "codex"));
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) ensureTestTools();
