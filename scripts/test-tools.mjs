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
 * Only the CLIs go on the tests' PATH (node_modules/.bin would also put a `node` there). Their links sit
 * inside node_modules, as `.bin` does: the worker's sandbox makes a CLI's outermost node_modules readable.
 */
export const TOOLS_BIN = path.join(TOOLS_DIR, "node_modules", ".svc-bin");
const BINS = { claude: "@anthropic-ai/claude-code", codex: "@openai/codex" };
/** The agent CLIs as the tests run them (links in TOOLS_BIN). */
export const CLAUDE_BIN = path.join(TOOLS_BIN, "claude");
export const CODEX_BIN = path.join(TOOLS_BIN, "codex");
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
  fs.mkdirSync(TOOLS_BIN, { recursive: true });
  for (const [name, pkg] of Object.entries(BINS)) {
    const manifest = JSON.parse(fs.readFileSync(path.join(TOOLS_DIR, "node_modules", pkg, "package.json"), "utf8"));
    const rel = typeof manifest.bin === "string" ? manifest.bin : manifest.bin[name];
    const link = path.join(TOOLS_BIN, name);
    fs.rmSync(link, { force: true });
    fs.symlinkSync(path.join("..", pkg, rel), link);
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) ensureTestTools();
