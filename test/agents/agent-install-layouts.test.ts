import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startAnthropicStandIn, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { startResponsesStandIn, type ResponsesStandIn } from "../helpers/responses-standin.js";
import { TOOLS_DIR, testNode } from "../../scripts/test-tools.mjs";

/**
 * The real Claude Code (2.1.197) and Codex (0.169.0) installed the ways end users install
 * them, each reached on PATH through the links those installers leave (never inside a
 * folder the sandbox mounts anyway), served by a real `svc-worker start` in real
 * bubblewrap, against stand-ins of their model APIs. In every layout one run with an app
 * tool, an approved command and a denied one completes:
 *
 * - `native`: Anthropic's native installer (`~/.local/bin/claude` -> `~/.local/share/claude/versions/<v>`);
 * - `npm-home`: `npm install -g` with a prefix in HOME (`~/.npm-global/bin/{claude,codex}`);
 * - `npm-system`: `npm install -g` with a system prefix (under /usr/local, read-only in the sandbox);
 * - `nvm`: the CLIs installed globally under nvm's Node 22 (`~/.nvm/versions/node/v22.x`), the worker on another Node;
 * - `home-bin`: links the user made in `~/bin`;
 * - `mise`: mise's shims (`~/.local/share/mise/shims/<cli>` -> the mise binary), resolved through `mise which`.
 */

const sandboxed = (process.platform === "linux" && detectSandbox().kind === "bubblewrap") || process.env.SVC_TEST_SANDBOX === "1";
const VERSIONS = { claude: "2.1.197", codex: "0.169.0" };
const TOOLS = path.join(TOOLS_DIR, "node_modules");
const CLAUDE_FILE = path.join(TOOLS, "@anthropic-ai", "claude-code", "bin", "claude.exe");
const CODEX_FILE = path.join(TOOLS, "@openai", "codex", "bin", "codex.js");
const MISE = path.join(TOOLS, "@jdxcode", "mise", "bin", "mise");
/** Where the machine's own programs are (node for `#!/usr/bin/env node`, bash, bwrap). */
const SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin";

interface Layout {
  name: string;
  /** The CLIs it installs (the native installer is Claude Code's only). */
  clis: ("claude-code" | "codex")[];
  /** Installs the CLIs into `home`; answers the PATH entries the user's shell has for them. */
  install(home: string): Promise<string[]>;
}

/**
 * `npm install -g` into a prefix, as a user runs it (nvm's npm does the same into its Node's prefix); tarballs from
 * npm's cache. Asynchronous: a test process blocked for seconds would let its own server's keep-alive sockets go stale.
 */
async function npmGlobal(prefix: string): Promise<void> {
  await promisify(execFile)("npm", ["install", "-g", "--prefix", prefix, "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", `@anthropic-ai/claude-code@${VERSIONS.claude}`, `@openai/codex@${VERSIONS.codex}`], { maxBuffer: 16 * 1024 * 1024 });
}

const LAYOUTS: Layout[] = [
  {
    name: "native",
    clis: ["claude-code"],
    install: async (home) => {
      const versions = path.join(home, ".local", "share", "claude", "versions");
      fs.mkdirSync(versions, { recursive: true });
      // The installer's binary is the npm package's native one.
      fs.copyFileSync(CLAUDE_FILE, path.join(versions, VERSIONS.claude));
      fs.chmodSync(path.join(versions, VERSIONS.claude), 0o755);
      fs.mkdirSync(path.join(home, ".local", "bin"), { recursive: true });
      fs.symlinkSync(path.join("..", "share", "claude", "versions", VERSIONS.claude), path.join(home, ".local", "bin", "claude"));
      return [path.join(home, ".local", "bin")];
    },
  },
  {
    name: "npm-home",
    clis: ["claude-code", "codex"],
    install: async (home) => {
      await npmGlobal(path.join(home, ".npm-global"));
      return [path.join(home, ".npm-global", "bin")];
    },
  },
  {
    name: "npm-system",
    clis: ["claude-code", "codex"],
    install: async (home) => {
      const prefix = path.join("/usr/local/lib", `svc-test-${path.basename(path.dirname(path.dirname(home)))}`);
      systemPrefixes.push(prefix);
      await npmGlobal(prefix);
      return [path.join(prefix, "bin")];
    },
  },
  {
    name: "nvm",
    clis: ["claude-code", "codex"],
    install: async (home) => {
      const node22 = testNode(22);
      if (!node22) throw new Error("the tests' Node 22 is missing");
      const prefix = path.join(home, ".nvm", "versions", "node", `v${execFileSync(node22, ["-p", "process.versions.node"]).toString().trim()}`);
      fs.mkdirSync(path.join(prefix, "bin"), { recursive: true });
      fs.copyFileSync(node22, path.join(prefix, "bin", "node"));
      fs.chmodSync(path.join(prefix, "bin", "node"), 0o755);
      await npmGlobal(prefix);
      return [path.join(prefix, "bin")];
    },
  },
  {
    name: "home-bin",
    clis: ["claude-code", "codex"],
    install: async (home) => {
      fs.mkdirSync(path.join(home, "bin"));
      fs.symlinkSync(CLAUDE_FILE, path.join(home, "bin", "claude"));
      fs.symlinkSync(CODEX_FILE, path.join(home, "bin", "codex"));
      return [path.join(home, "bin")];
    },
  },
  {
    name: "mise",
    clis: ["claude-code", "codex"],
    install: async (home) => {
      // mise's own programs: `mise link` takes an install made elsewhere (here the npm packages) as a tool version,
      // `mise use -g` makes it the user's; its shims are links to the mise binary.
      const env = { ...process.env, HOME: home, MISE_OFFLINE: "1", MISE_YES: "1", XDG_CONFIG_HOME: path.join(home, ".config"), XDG_DATA_HOME: path.join(home, ".local", "share") };
      const shims = path.join(home, ".local", "share", "mise", "shims");
      fs.mkdirSync(shims, { recursive: true });
      for (const [tool, version, bin, file] of [
        ["npm:@anthropic-ai/claude-code", VERSIONS.claude, "claude", CLAUDE_FILE],
        ["npm:@openai/codex", VERSIONS.codex, "codex", CODEX_FILE],
      ] as const) {
        const install = path.join(home, "mise-installs", bin, "bin");
        fs.mkdirSync(install, { recursive: true });
        fs.symlinkSync(file, path.join(install, bin));
        execFileSync(MISE, ["link", `${tool}@${version}`, path.dirname(install)], { env, cwd: home, stdio: "ignore" });
        execFileSync(MISE, ["use", "-g", `${tool}@${version}`], { env, cwd: home, stdio: "ignore" });
      }
      // The shims as mise makes them (links to its binary). Its reshim (run by each `mise use`) finds no programs in a
      // linked npm install offline and removes shims it does not know: so they are made after the last one.
      for (const bin of ["claude", "codex"]) fs.symlinkSync(fs.realpathSync(MISE), path.join(shims, bin));
      return [shims];
    },
  },
];
const systemPrefixes: string[] = [];

describe.runIf(sandboxed)("agent CLIs as users install them, in the sandbox", () => {
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let responses: ResponsesStandIn;
  let svc: Svc;
  let root: string;
  const workers: WorkerProcess[] = [];
  /** Per layout: its worker, its working folder. */
  const machines = new Map<string, { worker: WorkerProcess; workdir: string; pathEntries: string[]; home: string }>();

  beforeAll(async () => {
    // Codex will not set up its home under /tmp: these machines live in /var/tmp.
    root = fs.mkdtempSync("/var/tmp/svc-layouts-");
    // Every layout installed first, before any server or worker runs.
    const installed = new Map<string, { home: string; workdir: string; pathEntries: string[] }>();
    for (const layout of LAYOUTS) {
      const home = path.join(root, layout.name, "home");
      const workdir = path.join(root, layout.name, "project");
      fs.mkdirSync(path.join(home, ".codex"), { recursive: true });
      fs.mkdirSync(workdir, { recursive: true });
      installed.set(layout.name, { home, workdir, pathEntries: await layout.install(home) });
    }
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    anthropic = await startAnthropicStandIn();
    responses = await startResponsesStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    for (const layout of LAYOUTS) {
      const { home, workdir, pathEntries } = installed.get(layout.name)!;
      fs.writeFileSync(
        path.join(home, ".codex", "config.toml"),
        `model = "standin-model"\nmodel_provider = "standin"\n[model_providers.standin]\nname = "standin"\nbase_url = "${responses.url}/v1"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\n`,
      );
      const m = await pairViaApi(server, server.dev, `user-${layout.name}`, {
        workdir,
        runtimes: { ollama: false, llamacpp: false, lmstudio: false },
        policy: {
          agents: { "claude-code": layout.clis.includes("claude-code"), codex: layout.clis.includes("codex") },
          env: ["ANTHROPIC_BASE_URL", "CODEX_HOME"],
          providerKeys: ["ANTHROPIC_API_KEY", "STANDIN_API_KEY"],
        },
      });
      // The user's PATH: the layout's folders, then the system's; nothing of the tests' own.
      const worker = spawnWorker(["start"], m.home, {
        PATH: [...pathEntries, SYSTEM_PATH].join(":"),
        HOME: home,
        ANTHROPIC_BASE_URL: anthropic.url,
        ANTHROPIC_API_KEY: "sk-ant-standin",
        CODEX_HOME: path.join(home, ".codex"),
        STANDIN_API_KEY: "sk-standin",
      });
      workers.push(worker);
      machines.set(layout.name, { worker, workdir, pathEntries, home });
    }
    for (const { worker } of machines.values()) await worker.waitFor(/Connected/, 120_000);
  }, 600_000);
  afterAll(async () => {
    for (const w of workers) w.stop();
    await server?.close();
    await anthropic?.close();
    await responses?.close();
    if (root) fs.rmSync(root, { recursive: true, force: true });
    for (const p of systemPrefixes) fs.rmSync(p, { recursive: true, force: true });
    removeTempDirs();
  });

  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }

  /** One run with an app tool, an approved command and a denied one; what it did. */
  async function toolApprovedDenied(layout: string, cli: "claude-code" | "codex") {
    const { workdir } = machines.get(layout)!;
    const approved = `${cli}-approved`;
    const denied = `${cli}-denied`;
    // Claude Code asks before a command that writes; Codex before one it counts as dangerous.
    const prompt =
      cli === "claude-code"
        ? `[[tool:weather {"city":"Oslo"}]] [[bash:echo hi > ${approved}.txt]] [[bash:echo hi > ${denied}.txt]]`
        : `[tool:weather] [shell:rm -rf ${approved}] [shell:rm -rf ${denied}]`;
    if (cli === "codex") for (const d of [approved, denied]) fs.mkdirSync(path.join(workdir, d), { recursive: true });
    const toolCalls: unknown[] = [];
    const asked: string[] = [];
    const run = svc.runs.create({
      user: `user-${layout}`,
      model: cli,
      prompt,
      tools: [{ name: "weather", description: "Today's weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } }, run: (args) => (toolCalls.push(args), "sunny, 21 C") }],
      onApproval: (req) => {
        const text = JSON.stringify(req.arguments);
        asked.push(text.includes(approved) ? "approved" : text.includes(denied) ? "denied" : text);
        return text.includes(approved);
      },
    });
    const events = await collect(run);
    const result = await run.result();
    const did = cli === "claude-code" ? (name: string) => fs.existsSync(path.join(workdir, `${name}.txt`)) : (name: string) => !fs.existsSync(path.join(workdir, name));
    return { result, events, toolCalls: toolCalls.length, asked, approvedRan: did(approved), deniedRan: did(denied) };
  }

  const table: string[] = [];
  for (const layout of LAYOUTS) {
    for (const cli of layout.clis) {
      it(`${layout.name}: ${cli} found through the layout's link, started in the sandbox; a run with an app tool, an approved command and a denied one completes`, async () => {
        const got = await toolApprovedDenied(layout.name, cli);
        table.push(`${layout.name} x ${cli}: ${got.result.status}`);
        expect(got.result, JSON.stringify(got.events.at(-1))).toMatchObject({ status: "completed", runtime: cli });
        expect(got.toolCalls).toBe(1);
        expect(got.asked).toEqual(["approved", "denied"]);
        expect(got.approvedRan).toBe(true);
        expect(got.deniedRan).toBe(false);
        // Advertised with the version the CLI said inside the sandbox.
        const compute = await svc.users.compute(`user-${layout.name}`);
        const rt = compute.machines[0].runtimes.find((r) => r.name === cli)!;
        expect(rt).toMatchObject({ version: VERSIONS[cli === "claude-code" ? "claude" : "codex"], unavailable: null, supported: true });
      }, 180_000);
    }
  }

  it("each worker served what its layout installed, and printed it; the compute reads hold none of the machines' paths", async () => {
    for (const layout of LAYOUTS) {
      const { worker, home } = machines.get(layout.name)!;
      for (const cli of layout.clis) expect(worker.stdout).toMatch(new RegExp(`serves ${cli} \\(agent, user_subscription, ${VERSIONS[cli === "claude-code" ? "claude" : "codex"].replace(/\./g, "\\.")}`));
      const compute = JSON.stringify(await svc.users.compute(`user-${layout.name}`));
      expect(compute).not.toContain(home);
      expect(compute).not.toContain(root);
    }
    process.stdout.write(`\nlayout x CLI x result\n${table.join("\n")}\n`);
  });
});
