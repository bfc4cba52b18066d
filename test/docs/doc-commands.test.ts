import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES, RUN_STOP_CODES } from "@svc/contract";
import { DATABASES } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ROOT, removeTempDirs, tempDir } from "../helpers/process.js";

/**
 * The docs' commands, as written. Every ```sh block of README.md and docs/**\/*.md
 * runs: each file's blocks in order, in one non-interactive `bash` with
 * `set -euo pipefail`, against a started service, as a reader pastes them after
 * the quick start (`SVC_BASE_URL`, `SVC_API_KEY` and `SVC_CONNECT_KEY` exported,
 * the docs' `http://127.0.0.1:4000` replaced by the service's address). README's
 * two quick starts are left out: test/ops/quick-start.test.ts runs the app
 * developer's, and the other is `npm install && npm start` and `npm test`.
 *
 * Each `curl` must get a 2xx or 3xx answer, unless the line after its command is
 * a comment starting with the status the doc shows (`# 404 {"error":...}`): then
 * it must get exactly that status. A command that cannot run here (a browser
 * step, live Stripe, a model server, a process that runs until stopped, a change
 * to the working tree) is shown in a ```text block instead.
 *
 * Docs under docs/end-users/ run in an empty folder (the end user's machine);
 * the others in the repository's folder (the service's), each with its own HOME
 * and data folder (`SVC_DATA_DIR`, for the `svc` CLI).
 *
 * Beside the commands: every relative link in the docs reaches a file, every
 * `#anchor` a heading of it, the error doc names every error code and the
 * configuration doc every variable the service reads.
 *
 * `SVC_DOCS_PRINT=1` prints what each file's commands printed.
 */
const { db } = DATABASES[0];
const METRICS_TOKEN = "doc-commands-metrics-token-0123456789";

/** The Markdown files the links are checked in, relative to the repository. */
function markdownFiles(): string[] {
  const walk = (dir: string): string[] =>
    fs
      .readdirSync(path.join(ROOT, dir), { withFileTypes: true })
      .flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith(".md") ? [path.join(dir, e.name)] : []));
  return ["README.md", ...walk("docs").sort(), "sdk/README.md", "test/README.md"];
}

/** The files whose ```sh blocks run. */
function commandFiles(): string[] {
  return markdownFiles().filter((f) => f === "README.md" || f.startsWith("docs/"));
}

/** README without its two quick starts (each from its heading to the next `## `). */
function withoutQuickStarts(text: string): string {
  let out = text;
  for (const heading of ["## Quick start for app developers\n", "## Quick start\n"]) {
    const start = out.indexOf(heading);
    if (start < 0) continue;
    const end = out.indexOf("\n## ", start + 1);
    out = out.slice(0, start) + (end < 0 ? "" : out.slice(end + 1));
  }
  return out;
}

/** A file's ```sh blocks, in order (indented ones, in list items, dedented). */
export function shBlocks(file: string): string[] {
  let text = fs.readFileSync(path.join(ROOT, file), "utf8");
  if (file === "README.md") text = withoutQuickStarts(text);
  return [...text.matchAll(/^( *)```sh\n([\s\S]*?)^\1```/gm)].map((m) =>
    m[2]
      .split("\n")
      .map((l) => (l.startsWith(m[1]) ? l.slice(m[1].length) : l))
      .join("\n"),
  );
}

/**
 * A block made ready to run: each command (a line and its `\` continuations)
 * followed by a `# NNN ...` comment is told to expect that HTTP status.
 */
export function annotate(block: string): string {
  const lines = block.replace(/\n$/, "").split("\n");
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const command = [lines[i]];
    while (command[command.length - 1].endsWith("\\") && i + 1 < lines.length) command.push(lines[++i]);
    const expected = /^#\s*([1-5]\d\d)\b/.exec(lines[i + 1] ?? "")?.[1];
    if (expected && /\bcurl\b/.test(command.join("\n"))) out.push(`export DOC_EXPECT=${expected}`, ...command, "unset DOC_EXPECT");
    else out.push(...command);
  }
  return out.join("\n");
}

/**
 * What runs before a file's blocks: strict mode, and `curl` checking the status
 * of each answer (its headers dumped to a file, or to the one the doc names).
 */
const PRELUDE = [
  "set -euo pipefail",
  "curl() {",
  '  local hdr="" own=1 prev="" a',
  '  for a in "$@"; do',
  '    if [ "$prev" = "-D" ] || [ "$prev" = "--dump-header" ]; then hdr="$a"; own=0; fi',
  '    prev="$a"',
  "  done",
  '  if [ "$own" = 1 ]; then hdr=$(mktemp); set -- -D "$hdr" "$@"; fi',
  '  local rc=0 status=""',
  '  command curl "$@" || rc=$?',
  "  status=$(grep -a -E '^HTTP/' \"$hdr\" 2>/dev/null | tail -n 1 | cut -d' ' -f2 || true)",
  '  if [ "$own" = 1 ]; then rm -f "$hdr"; fi',
  '  if [ -n "${DOC_EXPECT:-}" ]; then',
  '    if [ "$status" != "$DOC_EXPECT" ]; then echo "doc-commands: expected HTTP $DOC_EXPECT, got ${status:-no answer}: curl $*" >&2; return 1; fi',
  "  else",
  '    case "$status" in',
  "      2??|3??) ;;",
  '      *) echo "doc-commands: HTTP ${status:-no answer}, and the doc shows no error here: curl $*" >&2; return 1 ;;',
  "    esac",
  "  fi",
  '  return "$rc"',
  "}",
  "",
].join("\n");

/** GitHub's heading anchors: lowercase, punctuation but `-` and `_` dropped, spaces to `-`; repeats get `-1`, `-2`, ... */
export function anchorsOf(markdown: string): Set<string> {
  const text = markdown.replace(/^( *)```[\s\S]*?^\1```/gm, "");
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const m of text.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = m[1]
      .replace(/<[^>]+>/g, "")
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of text.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]);
  return anchors;
}

/** A file's relative links (outside code), as written. */
function linksOf(markdown: string): string[] {
  const text = markdown.replace(/^( *)```[\s\S]*?^\1```/gm, "").replace(/`[^`\n]*`/g, "");
  return [...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]).filter((l) => !/^[a-z][a-z0-9+.-]*:/i.test(l));
}

function run(script: string, cwd: string, env: Record<string, string>, timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const shell = spawn("bash", ["-s"], { cwd, env, stdio: ["pipe", "pipe", "pipe"], detached: true });
    let out = "";
    shell.stdout.on("data", (c) => (out += c));
    shell.stderr.on("data", (c) => (out += c));
    const timer = setTimeout(() => {
      out += `\n[doc-commands: killed after ${timeoutMs} ms]`;
      try {
        process.kill(-shell.pid!, "SIGKILL");
      } catch {}
    }, timeoutMs);
    shell.on("close", (code) => {
      clearTimeout(timer);
      try {
        process.kill(-shell.pid!, "SIGTERM"); // anything the blocks left in the background
      } catch {}
      resolve({ code, out });
    });
    shell.stdin.end(script);
  });
}

describe("the docs' commands", () => {
  let server: TestServer;
  // One npm cache for every file's shell: `npx svc` links this folder's package into it once, not once per file.
  let npmCache: string;

  beforeAll(async () => {
    npmCache = tempDir("svc-doc-commands-npm-");
    server = await startTestServerOn(db, { SVC_METRICS_TOKEN: METRICS_TOKEN }, { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  const files = commandFiles().filter((f) => shBlocks(f).length > 0);

  it("are found: the reference docs show commands to run", () => {
    expect(files.length).toBeGreaterThan(3);
  });

  for (const file of files) {
    it(`${file}: every sh block runs, in order, in one shell`, async () => {
      const home = tempDir("svc-doc-commands-");
      const fill = (text: string) => text.replaceAll("http://127.0.0.1:4000", server.url);
      const script = [PRELUDE, ...shBlocks(file).map((b) => fill(annotate(b)))].join("\n");
      const { code, out } = await run(script, file.startsWith("docs/end-users/") ? home : ROOT, {
        PATH: process.env.PATH ?? "",
        HOME: home,
        LANG: "C.UTF-8",
        SVC_BASE_URL: `${server.url}/v1`,
        SVC_API_KEY: server.dev.appKey,
        SVC_CONNECT_KEY: server.dev.connectKey,
        SVC_METRICS_TOKEN: METRICS_TOKEN,
        SVC_DATA_DIR: path.join(home, "svc-data"),
        npm_config_cache: npmCache,
        // What npx needs is here already (this folder's own package): no registry round trip for it.
        npm_config_prefer_offline: "true",
        npm_config_update_notifier: "false",
      }, 400_000);
      if (process.env.SVC_DOCS_PRINT) console.log(`--- ${file}\n${out}`);
      expect(code, `${file}'s commands failed (exit ${code}); the shell said:\n${out}`).toBe(0);
    }, 450_000);
  }
});

describe("the docs' links and tables", () => {
  it("every relative link reaches a file, and every #anchor a heading in it", () => {
    const broken: string[] = [];
    for (const file of markdownFiles()) {
      const text = fs.readFileSync(path.join(ROOT, file), "utf8");
      for (const link of linksOf(text)) {
        const [target, anchor] = link.split("#", 2);
        const resolved = target === "" ? file : path.normalize(path.join(path.dirname(file), decodeURIComponent(target)));
        if (!fs.existsSync(path.join(ROOT, resolved))) {
          broken.push(`${file}: ${link} (no ${resolved})`);
          continue;
        }
        if (anchor !== undefined && resolved.endsWith(".md") && !anchorsOf(fs.readFileSync(path.join(ROOT, resolved), "utf8")).has(anchor)) {
          broken.push(`${file}: ${link} (no heading #${anchor} in ${resolved})`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it("the errors doc names every error code and every code a run stops with", () => {
    const doc = fs.readFileSync(path.join(ROOT, "docs/app/errors.md"), "utf8");
    const missing = [...Object.keys(ERROR_CODES), ...Object.keys(RUN_STOP_CODES)].filter((c) => !doc.includes(`\`${c}\``));
    expect(missing).toEqual([]);
  });

  it("the configuration doc names every variable the service reads", () => {
    const config = fs.readFileSync(path.join(ROOT, "server/config.ts"), "utf8");
    const env = config.slice(config.indexOf("const Env = z.object({"), config.indexOf("});", config.indexOf("const Env = z.object({")));
    const names = [...env.matchAll(/^ {2}([A-Z][A-Z0-9_]+):/gm)].map((m) => m[1]);
    expect(names.length).toBeGreaterThan(30);
    const doc = fs.readFileSync(path.join(ROOT, "docs/operators/configuration.md"), "utf8");
    expect(names.filter((n) => !doc.includes(`\`${n}\``))).toEqual([]);
  });

  it("finds GitHub's anchors as GitHub makes them", () => {
    expect([...anchorsOf("# A\n## Responses (`POST /v1/responses`)\n## svc/echo: a model to develop against\n## A\n```sh\n# not a heading\n```\n")]).toEqual([
      "a",
      "responses-post-v1responses",
      "svcecho-a-model-to-develop-against",
      "a-1",
    ]);
  });
});
