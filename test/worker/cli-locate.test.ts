import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { locateCli, shimOf } from "../../worker/src/runtimes/locate.js";
import { discoverRuntimes } from "../../worker/src/runtimes/discover.js";
import { launchableOf } from "../../worker/src/policy/launchable.js";
import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { redact } from "../../worker/src/redact.js";
import { removeTempDirs, tempDir } from "../helpers/process.js";
import { CLAUDE_BIN, CODEX_BIN } from "../../scripts/test-tools.mjs";
import type { Settings } from "../../worker/src/store.js";

/**
 * Finding the agent CLI the user's shell would run, with version managers' shims in the
 * forms asdf and volta write them (mise's, with the real mise, are in
 * agent-install-layouts.test.ts): resolved through the manager's `which` where it answers,
 * refused with the policy line that fixes it where it cannot; an explicit path in the
 * policy wins. The managers here are stand-ins that answer `which` as theirs do (neither
 * is packaged for npm or Debian); the shims are the files they write.
 */
const SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin";
const sandboxHere = process.platform === "linux" && detectSandbox().kind === "bubblewrap";
const CLAUDE_REAL = () => fs.realpathSync(CLAUDE_BIN);

describe("agent CLIs behind version managers' shims", () => {
  let home: string;
  let workdir: string;
  const script = (file: string, text: string) => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text, { mode: 0o755 });
  };

  beforeAll(() => {
    home = tempDir("svc-locate-home-");
    workdir = tempDir("svc-locate-work-");
    // asdf 0.16's shim, and its manager answering `which` from the version the folder pins (here: always Claude Code).
    script(path.join(home, ".asdf", "shims", "claude"), `#!/usr/bin/env bash\n# asdf-plugin: nodejs 22.12.0\nexec ${path.join(home, ".asdf", "bin", "asdf")} exec "claude" "$@" # asdf_allow: ' asdf '\n`);
    script(path.join(home, ".asdf", "bin", "asdf"), `#!/bin/sh\n[ "$1" = which ] && [ "$2" = claude ] && { echo ${CLAUDE_REAL()}; exit 0; }\nexit 1\n`);
    // volta's: a link to its volta-shim binary, with volta beside it.
    script(path.join(home, ".volta", "bin", "volta-shim"), "#!/bin/sh\nexit 1\n");
    script(path.join(home, ".volta", "bin", "volta"), `#!/bin/sh\n[ "$1" = which ] && [ "$2" = codex ] && { echo ${fs.realpathSync(CODEX_BIN)}; exit 0; }\nexit 1\n`);
    fs.symlinkSync("volta-shim", path.join(home, ".volta", "bin", "codex"));
    // A shim whose manager knows no version for this folder (asdf: "No version is set for command claude").
    script(path.join(home, ".lost", "shims", "claude"), `#!/usr/bin/env bash\nexec ${path.join(home, ".lost", "bin", "asdf")} exec "claude" "$@"\n`);
    script(path.join(home, ".lost", "bin", "asdf"), `#!/bin/sh\necho "No version is set for command claude" >&2\nexit 126\n`);
  });
  afterAll(() => removeTempDirs());

  it("knows each manager's shim, and a plain link or binary is none", () => {
    expect(shimOf(path.join(home, ".asdf", "shims", "claude"))).toEqual({ manager: "asdf", program: path.join(home, ".asdf", "bin", "asdf") });
    expect(shimOf(path.join(home, ".volta", "bin", "codex"))).toEqual({ manager: "volta", program: path.join(home, ".volta", "bin", "volta") });
    expect(shimOf(CLAUDE_BIN)).toBeNull();
    expect(shimOf(CODEX_BIN)).toBeNull();
  });

  it("resolves asdf's and volta's shims through their manager, asked in the working folder", () => {
    const env = { PATH: `${path.join(home, ".asdf", "shims")}:${path.join(home, ".volta", "bin")}:${SYSTEM_PATH}`, HOME: home };
    expect(locateCli("claude-code", { env, cwd: workdir })).toEqual({ ok: true, command: CLAUDE_REAL(), found: path.join(home, ".asdf", "shims", "claude"), via: "asdf" });
    expect(locateCli("codex", { env, cwd: workdir })).toMatchObject({ ok: true, command: fs.realpathSync(CODEX_BIN), via: "volta" });
  });

  it("a shim its manager cannot resolve is refused, naming the shim and the policy line; the policy's path then wins", () => {
    const env = { PATH: `${path.join(home, ".lost", "shims")}:${SYSTEM_PATH}`, HOME: home };
    const lost = locateCli("claude-code", { env, cwd: workdir });
    expect(lost).toMatchObject({ ok: false, code: "cli_not_launchable" });
    expect(lost.ok === false && lost.message).toBe(
      `${path.join(home, ".lost", "shims", "claude")} is a shim of asdf, and \`asdf which claude\` did not say which claude it runs (No version is set for command claude); name the real one: svc-worker policy set commands.claude-code /full/path/to/claude`,
    );
    expect(locateCli("claude-code", { env, cwd: workdir, explicit: CLAUDE_BIN })).toEqual({ ok: true, command: CLAUDE_BIN, found: CLAUDE_BIN });
    expect(locateCli("claude-code", { env, cwd: workdir, explicit: "/nowhere/claude" })).toMatchObject({ ok: false, code: "cli_not_launchable", message: expect.stringContaining("commands.claude-code") });
    // Not there at all: not found (not advertised), as before.
    expect(locateCli("claude-code", { env: { PATH: SYSTEM_PATH, HOME: home }, cwd: workdir })).toMatchObject({ ok: false, code: "cli_not_found" });
  });

  it.runIf(sandboxHere || process.env.SVC_TEST_SANDBOX === "1")("discovery advertises the unresolvable shim as cli_not_launchable (its message without the machine's paths), and serves it once the policy names the path", async () => {
    const env = { PATH: `${path.join(home, ".lost", "shims")}:${SYSTEM_PATH}`, HOME: home };
    const settings = (commands: Record<string, string>): Settings =>
      ({ workdir, runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false }, policy: { agents: { "claude-code": true }, commands } }) as Settings;
    const lost = await discoverRuntimes(settings({}), env);
    expect(lost.runtimes).toEqual([]);
    expect(lost.unsupported).toEqual([expect.objectContaining({ name: "claude-code", supported: false, unavailable: { reason: "cli_not_launchable", message: expect.stringContaining("svc-worker policy set commands.claude-code") } })]);
    expect(lost.unsupported[0].unavailable!.message).not.toContain(home);
    // The worker's own lines keep the whole text.
    expect(lost.notes.join("\n")).toContain(path.join(home, ".lost", "shims", "claude"));

    const named = await discoverRuntimes(settings({ "claude-code": CLAUDE_BIN }), env);
    expect(named.runtimes.map((r) => [r.advert.name, r.advert.version])).toEqual([["claude-code", "2.1.197"]]);
    expect(named.unsupported).toEqual([]);
  }, 60_000);
});

describe("what the sandbox starts for a CLI", () => {
  afterAll(() => removeTempDirs());

  it("a link resolves to its real file; a script runs on the interpreter its #! names, found on the CLI's PATH, with env's options", () => {
    const home = tempDir("svc-launchable-home-");
    expect(launchableOf(CLAUDE_BIN, { PATH: SYSTEM_PATH }, home)).toEqual({ command: CLAUDE_REAL(), prefix: [], readable: [path.dirname(CLAUDE_REAL())] });
    const codex = launchableOf(CODEX_BIN, { PATH: SYSTEM_PATH }, home);
    expect(codex.command).toBe(fs.realpathSync(which("node")));
    expect(codex.prefix).toEqual([fs.realpathSync(CODEX_BIN)]);
    const withOptions = path.join(home, "tool");
    fs.writeFileSync(withOptions, "#!/usr/bin/env -S node --no-warnings\nconsole.log(1)\n", { mode: 0o755 });
    expect(launchableOf(withOptions, { PATH: SYSTEM_PATH }, home)).toMatchObject({ command: fs.realpathSync(which("node")), prefix: ["--no-warnings", withOptions] });
    // A script whose interpreter is not on the PATH the CLI gets is said as such.
    expect(() => launchableOf(CODEX_BIN, { PATH: "/nonexistent" }, home)).toThrow(/a script for node .* not on the PATH/);
  });
});

describe("what of a machine-side failure the app sees", () => {
  it("paths, the user's name and the worker's environment values are taken out; URLs, codes and words stay", () => {
    const env = { HOME: "/home/zelda", USER: "zelda", SECRET_TOKEN: "tok-1234567890", LANG: "C.UTF-8" };
    const text =
      "claude exited (127) without a result: /home/zelda/.local/bin/claude: spawn /home/zelda/.local/bin/claude ENOENT; C:\\Users\\zelda\\bin\\codex.cmd missing; ~/notes.txt; zelda's token tok-1234567890; API at https://api.anthropic.com/v1/messages said 529 (exit 1/2)";
    expect(redact(text, env)).toBe(
      "claude exited (127) without a result: <path>: spawn <path> ENOENT; <path> missing; <path>; <user>'s token <env>; API at https://api.anthropic.com/v1/messages said 529 (exit 1/2)",
    );
  });
});

function which(name: string): string {
  for (const dir of SYSTEM_PATH.split(":")) if (fs.existsSync(path.join(dir, name))) return path.join(dir, name);
  throw new Error(`${name} not on ${SYSTEM_PATH}`);
}
