import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { USER_CODE_ALPHABET } from "@svc/contract";
import { DATABASES } from "../helpers/databases.js";
import { pairInto } from "../helpers/pair-via-api.js";
import { nodeOf, pollUntil, removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { connectWorkerDouble, answerNothing, type WorkerDouble } from "../helpers/raw-worker.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";

/**
 * The first program of each doc page, as written, as a reader runs it after README's quick
 * start: alice has a machine online that serves no model (the quick start's step 3), and later
 * none online (its last step stops the worker). Each program is saved under the name its doc
 * gives (`example.mjs`, `chat.mjs`, `responses.mjs`) in an empty folder, where the doc's own
 * commands run: its `npm install` (the SDK from the running service, or the `openai` client from
 * the registry), then `node <file>`, with only what the quick start's step 1 exports
 * (`SVC_BASE_URL`, `SVC_API_KEY`, `SVC_CONNECT_KEY`) and the docs' `http://127.0.0.1:4000`
 * replaced by the service's address. Each must exit 0, write nothing to stderr (no Node warning,
 * no uncaught error) and print exactly the doc's "It prints:" block.
 *
 * On Node 20 (the oldest a reader's app may have: npm installs `openai` 6 there) and Node 24
 * (`openai` 7): real binaries from test/tools, npm itself running on each.
 *
 * Then pairing.md's pairing command, as written, through `npx` from an empty npm cache, with the
 * code it prints approved, and the code README's quick start used to show refused with the rule.
 */
const { db } = DATABASES[0];

interface DocExample {
  /** The program, as written. */
  code: string;
  /** The file name the doc saves it as (from its `node <file>` command). */
  file: string;
  /** The doc's commands: the installs, then `node <file>`. */
  commands: string[];
  /** What the doc says it prints. */
  prints: string;
}

/**
 * A doc's first program: its first ```js block (from `heading` on, when given), the first block
 * after it whose commands `npm install` (```sh or ```text), and the ```text block after "It prints:".
 */
export function firstExample(doc: string, heading?: string): DocExample {
  const text = fs.readFileSync(path.join(ROOT, doc), "utf8");
  const from = heading ? text.indexOf(`\n${heading}\n`) : 0;
  expect(from, `${doc} has "${heading}"`).toBeGreaterThanOrEqual(0);
  const rest = text.slice(from);
  const js = /```js\n([\s\S]*?)```/.exec(rest);
  expect(js, `a \`\`\`js block in ${doc}`).toBeTruthy();
  const after = rest.slice(js!.index + js![0].length);
  const commandBlock = [...after.matchAll(/```(?:sh|text)\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => /^npm install /m.test(b));
  expect(commandBlock, `an \`npm install\` block after ${doc}'s program`).toBeTruthy();
  const commands = commandBlock!.trimEnd().split("\n");
  const run = commands.at(-1)!;
  const file = /^node (\S+\.mjs)$/.exec(run)?.[1];
  expect(file, `${doc}'s commands end \`node <file>.mjs\` (they are: ${commands.join("; ")})`).toBeTruthy();
  const prints = /It prints:\n\n```text\n([\s\S]*?)```/.exec(after)?.[1];
  expect(prints, `an "It prints:" \`\`\`text block in ${doc}`).toBeTruthy();
  return { code: js![1], file: file!, commands, prints: prints! };
}

const EXAMPLES: readonly { doc: string; heading?: string }[] = [
  { doc: "sdk/README.md", heading: "## Quick example" },
  { doc: "docs/app/chat-completions.md" },
  { doc: "docs/app/responses.md" },
];

const NODES = [20, 24] as const;

/** A bash script run in `cwd`; its exit code, stdout and stderr. */
function sh(script: string, cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number, onOut?: (all: string) => void): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn("bash", ["-c", script], { cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c) => {
      stdout += c;
      onOut?.(stdout);
    });
    child.stderr.on("data", (c) => (stderr += c));
    const timer = setTimeout(() => {
      stderr += `\n[killed after ${timeoutMs} ms]`;
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {}
    }, timeoutMs);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * What the machine's shells have for reaching the registry (a proxy, the CAs to trust, npm's global
 * config with its `cafile`): a reader's npm has them too, whichever Node runs it.
 */
function machineNetwork(): NodeJS.ProcessEnv {
  const names = /^(NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR|HTTPS?_PROXY|NO_PROXY|ALL_PROXY|npm_config_(globalconfig|cafile|registry|proxy|https_proxy|noproxy|strict_ssl))$/i;
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => names.test(name)));
}

describe("each doc page's first program, as written, after the quick start", () => {
  let server: TestServer;
  let machine: WorkerDouble;
  const folders = new Map<string, string>();
  // The reader's npm cache: the examples' installs take what it holds (`--prefer-offline`), as a reader's npm would.
  const npmCache = process.env.npm_config_cache ?? path.join(os.homedir(), ".npm");

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    // The quick start's state: alice has a session and a machine online that serves no model (steps 2 to 4).
    const paired = await pairInto(tempDir("svc-first-examples-machine-"), server, server.dev, "alice");
    machine = await connectWorkerDouble(server.url, paired.token, answerNothing, []);
  }, 120_000);
  afterAll(async () => {
    await machine?.close();
    await server?.close();
    removeTempDirs();
  });

  const node = (major: number, ctx: TestContext): string => nodeOf(major, ctx, "the docs' first programs");

  /** A reader's shell after the quick start's step 1, with this Node first on the PATH. */
  function readerEnv(bin: string, home: string): NodeJS.ProcessEnv {
    return {
      ...machineNetwork(),
      PATH: `${path.dirname(bin)}${path.delimiter}${process.env.PATH}`,
      HOME: home,
      LANG: "C.UTF-8",
      SVC_BASE_URL: `${server.url}/v1`,
      SVC_API_KEY: server.dev.appKey,
      SVC_CONNECT_KEY: server.dev.connectKey,
      npm_config_cache: npmCache,
      npm_config_prefer_offline: "true",
      npm_config_audit: "false",
      npm_config_fund: "false",
      npm_config_update_notifier: "false",
    };
  }

  const fill = (text: string) => text.replaceAll("http://127.0.0.1:4000", server.url);

  /** Runs the program (already installed in `dir`) with the doc's `node <file>` and checks it printed what the doc says. */
  async function runAsWritten(doc: string, example: DocExample, dir: string, bin: string) {
    const { code, stdout, stderr } = await sh(fill(example.commands.at(-1)!), dir, readerEnv(bin, dir), 60_000);
    expect({ code, stderr }, `${doc}: \`${example.commands.at(-1)}\` on ${bin}; it printed:\n${stdout}`).toEqual({ code: 0, stderr: "" });
    expect(stdout).toBe(example.prints);
  }

  for (const { doc, heading } of EXAMPLES) {
    it.for(NODES)(`${doc}: saved, installed and run as the doc says on Node %i, it prints what the doc says`, { timeout: 180_000 }, async (major, ctx) => {
      const bin = node(major, ctx);
      const example = firstExample(doc, heading);
      const dir = tempDir("svc-first-example-");
      fs.writeFileSync(path.join(dir, example.file), example.code);
      const installs = example.commands.slice(0, -1).map(fill).join("\n");
      const installed = await sh(`set -euo pipefail\n${installs}`, dir, readerEnv(bin, dir), 150_000);
      expect(installed.code, `${doc}'s install on Node ${major}:\n${installed.stdout}\n${installed.stderr}`).toBe(0);
      if (example.code.includes('from "openai"')) {
        // What the docs say npm installs: openai 6 on Node 20 (7 asks for Node 22), 7 on Node 22 and newer.
        const version = JSON.parse(fs.readFileSync(path.join(dir, "node_modules/openai/package.json"), "utf8")).version as string;
        expect(version.split(".")[0], `openai ${version} on Node ${major}`).toBe(major === 20 ? "6" : "7");
      }
      folders.set(`${doc}@${major}`, dir);
      await runAsWritten(doc, example, dir, bin);
    });
  }

  it("once the quick start's worker is stopped (alice's machine offline), each program still prints what its doc says", { timeout: 120_000 }, async (ctx) => {
    const appKey = { authorization: `Bearer ${server.dev.appKey}` };
    await machine.close();
    await pollUntil(
      async () => ((await (await server.fetch("/v1/users/alice/compute", { headers: appKey })).json()) as { machines: { state: string }[] }).machines[0]?.state,
      (s) => s === "offline",
      20_000,
      "alice's machine offline",
    );
    for (const major of NODES) {
      for (const { doc, heading } of EXAMPLES) {
        const dir = folders.get(`${doc}@${major}`);
        if (!dir) continue; // skipped above (no such Node here)
        await runAsWritten(doc, firstExample(doc, heading), dir, node(major, ctx));
      }
    }
  });

  it("docs/app/pairing.md: the pairing command, as written, pairs a machine through npx from an empty cache once its code is approved", { timeout: 180_000 }, async (ctx) => {
    const bin = node(20, ctx); // the oldest Node the worker runs on (20.19)
    const text = fs.readFileSync(path.join(ROOT, "docs/app/pairing.md"), "utf8");
    const command = /```text\n\s*(npx --yes \S+ pair [^\n]*)\n/.exec(text)?.[1];
    expect(command, "pairing.md's first example: the npx pairing command").toBeTruthy();
    expect(command).toContain("--connect-key $SVC_CONNECT_KEY");
    const home = tempDir("svc-first-example-pairing-");
    // An empty npm cache, as on a machine that never ran the worker.
    const env = { ...readerEnv(bin, home), npm_config_cache: path.join(home, ".npm"), npm_config_prefer_offline: "false" };
    let code: string | undefined;
    let approved = false;
    const started = Date.now();
    const session = ((await (await server.fetch("/v1/end_users/session", { method: "POST", headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, body: JSON.stringify({ user: "alice" }) })).json()) as { session: string }).session;
    const approve = async (userCode: string) => {
      const res = await server.fetch("/v1/device/approve", { method: "POST", headers: { authorization: `Bearer ${session}`, "content-type": "application/json" }, body: JSON.stringify({ user_code: userCode }) });
      expect(res.status).toBe(200);
      approved = true;
    };
    let approving: Promise<void> | undefined;
    const { code: exit, stdout, stderr } = await sh(fill(command!), home, env, 150_000, (out) => {
      const m = /! First copy your one-time code: ([A-Z]{4}-[A-Z]{4})/.exec(out);
      if (m && !code) {
        code = m[1];
        console.log(`pairing.md: npx printed the code after ${((Date.now() - started) / 1000).toFixed(1)} s (the first npx from an empty cache)`);
        approving = approve(code);
      }
    });
    await approving;
    expect({ exit, approved }, `the pairing command said:\n${stdout}\n${stderr}`).toEqual({ exit: 0, approved: true });
    // What the doc says it prints: the code (8 letters of the alphabet), then, approved, the pairing.
    expect([...code!.replace("-", "")].every((c) => USER_CODE_ALPHABET.includes(c))).toBe(true);
    expect(stdout).toMatch(/✓ Paired with Local development app as machine mch_\w+\./);
    expect(text).toContain("`✓ Paired with <your app's name> as machine <its id>.`");
  });

  it("the code README's quick start once showed (ABCD-EFGH, with vowels) is refused with the rule: which letters a code is made of", async () => {
    const { session } = (await (await server.fetch("/v1/end_users/session", { method: "POST", headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, body: JSON.stringify({ user: "alice" }) })).json()) as { session: string };
    const res = await server.fetch("/v1/device/approve", { method: "POST", headers: { authorization: `Bearer ${session}`, "content-type": "application/json" }, body: JSON.stringify({ user_code: "ABCD-EFGH" }) });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; param: string; message: string } };
    expect(error).toMatchObject({ code: "invalid_request", param: "user_code" });
    expect(error.message).toContain(USER_CODE_ALPHABET);
    expect(error.message).toContain("no vowels");
    // README's step 4 placeholder is a code in form (refused only as unknown), not a malformed one.
    const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");
    const placeholder = /^USER_CODE=([A-Z]{4}-[A-Z]{4})/m.exec(readme)?.[1];
    expect(placeholder, "README's step 4 sets USER_CODE").toBeTruthy();
    expect([...placeholder!.replace("-", "")].every((c) => USER_CODE_ALPHABET.includes(c))).toBe(true);
  });
});
