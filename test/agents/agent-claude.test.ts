import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import type { Job, JobEvent } from "@svc/contract";
import { ClaudeCodeRuntime } from "../../worker/src/runtimes/claude-code.js";
import type { AgentProcess, AgentRuntimeOptions, JobContext } from "../../worker/src/runtimes/runtime.js";
import { machinePolicy } from "../../worker/src/policy/index.js";
import { Policy } from "../../worker/src/policy/schema.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { DEFAULT_ANSWER, startAnthropicStandIn, USAGE, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";

/** The real Claude Code CLI (a pinned dev dependency). */
const CLAUDE = CLAUDE_BIN;
/** In the worker's environment, never allowed through to the CLI. */
const SECRET = "s3cret-value-that-must-not-leak";

/**
 * The real Claude Code 2.1.197, driven through the SDK: the real server, a real
 * `svc-worker start` serving it (Claude Code turned on in the user's policy, no
 * sandbox required here), and the CLI talking to a stand-in of the Anthropic
 * Messages API on 127.0.0.1, scripted by markers in each prompt.
 */
describe("Claude Code, the real CLI, through the SDK", () => {
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let svc: Svc;
  let workdir: string;
  let claudeHome: string;
  let worker: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    anthropic = await startAnthropicStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    workdir = fs.realpathSync(tempDir("svc-claude-work-"));
    claudeHome = fs.realpathSync(tempDir("svc-claude-home-"));
    const machine = await pairViaApi(server, server.dev, "dana", {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false, claude: CLAUDE },
      policy: { agents: { "claude-code": true }, sandbox: { required: false }, env: ["ANTHROPIC_BASE_URL"], providerKeys: ["ANTHROPIC_API_KEY"] },
    });
    worker = spawnWorker(["start"], machine.home, { HOME: claudeHome, ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin", SECRET_X: SECRET });
    await worker.waitFor(/Connected/);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await anthropic?.close();
    removeTempDirs();
  });

  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }
  const textOf = (events: RunEvent[]) => events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join("");
  const activities = (events: RunEvent[]) => events.flatMap((e) => (e.kind === "activity" ? [e] : []));
  /** Claude Code processes (or sandboxes around one) started by this file's worker, found by the HOME they were given: their command lines. */
  const claudeProcesses = () =>
    fs.readdirSync("/proc").flatMap((pid) => {
      if (!/^\d+$/.test(pid)) return [];
      try {
        const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ");
        const ours = fs.readFileSync(`/proc/${pid}/environ`, "utf8").includes(`HOME=${claudeHome}\0`);
        return ours && (cmdline.includes(CLAUDE) || cmdline.includes(fs.realpathSync(CLAUDE))) ? [`${pid}: ${cmdline}`] : [];
      } catch {
        return [];
      }
    });

  it("streams a plain answer token by token, once, on the user's subscription route", async () => {
    const run = svc.runs.create({ user: "dana", prompt: "Say hello", route: { prefer: ["user-subscription"] } });
    const events = await collect(run);
    const result = await run.result();
    expect(result).toMatchObject({ status: "completed", route: "user-subscription", runtime: "claude-code", output: DEFAULT_ANSWER });
    // Several deltas, as the model streamed them, and the whole block not sent again after them.
    expect(events.filter((e) => e.kind === "text_delta").length).toBeGreaterThan(1);
    expect(textOf(events)).toBe(DEFAULT_ANSWER);
    // The CLI ran with the pinned flags: no settings files, our MCP config only, asking through stdio.
    const last = anthropic.messages().at(-1)!;
    expect(JSON.stringify(last.messages)).toContain("Say hello");
  });

  it("reports usage with the cache reads and writes of the model API, in the events and the ledger", async () => {
    const run = svc.runs.create({ user: "dana", prompt: "Count my tokens" });
    const events = await collect(run);
    const result = await run.result();
    expect(result.status).toBe("completed");
    const usage = events.find((e) => e.kind === "usage");
    expect(usage?.usage).toMatchObject({
      inputTokens: USAGE.input_tokens,
      cacheReadTokens: USAGE.cache_read_input_tokens,
      cacheWriteTokens: USAGE.cache_creation_input_tokens,
      outputTokens: USAGE.output_tokens,
    });
    const rows = await server.db.prisma.usageRow.findMany({ where: { runId: await run.runId, kind: "tokens" } });
    expect(rows.map((r) => [Number(r.inputTokens), Number(r.cacheReadTokens), Number(r.cacheWriteTokens), Number(r.outputTokens)])).toEqual([
      [USAGE.input_tokens, USAGE.cache_read_input_tokens, USAGE.cache_creation_input_tokens, USAGE.output_tokens],
    ]);
  });

  it("asks the app before a command that writes: allowed, it runs in the working folder; denied, it does not", async () => {
    for (const allow of [true, false]) {
      const file = allow ? "allowed.txt" : "denied.txt";
      const asked: unknown[] = [];
      const run = svc.runs.create({
        user: "dana",
        prompt: `Write the file [[bash:echo hi > ${file}]]`,
        onApproval: (req) => (asked.push(req), allow ? true : { decision: "deny", reason: "not today" }),
      });
      const events = await collect(run);
      const result = await run.result();
      expect(result.status).toBe("completed");
      expect(asked).toEqual([expect.objectContaining({ what: "permission", tool: "Bash", arguments: expect.objectContaining({ command: `echo hi > ${file}` }) })]);
      expect(fs.existsSync(path.join(workdir, file))).toBe(allow);
      const ran = activities(events).filter((a) => a.summary.startsWith("ran "));
      if (allow) {
        expect(result.output).toBe("The tool said: (Bash completed with no output)");
        // The app sees the command and the size of its output (the default policy), not the output.
        expect(ran).toEqual([{ kind: "activity", summary: `ran echo hi > ${file} (exit 0)`, detail: { command: `echo hi > ${file}`, exitCode: 0, outputLines: 0, outputBytes: 0 } }]);
      } else {
        expect(result.output).toBe("The tool said: not today");
        expect(ran).toEqual([]);
      }
    }
  });

  it("reports what a command printed by its size only, and other tools by name", async () => {
    fs.writeFileSync(path.join(workdir, "notes.txt"), "line one\nline two\n");
    const run = svc.runs.create({ user: "dana", prompt: "Look [[bash:cat notes.txt]] [[read:notes.txt]]", onApproval: () => true });
    const events = await collect(run);
    const result = await run.result();
    expect(result.status).toBe("completed");
    const acts = activities(events);
    expect(acts).toContainEqual({ kind: "activity", summary: "ran cat notes.txt (exit 0)", detail: { command: "cat notes.txt", exitCode: 0, outputLines: 2, outputBytes: 17 } });
    expect(acts).toContainEqual({ kind: "activity", summary: "uses Read", detail: { file_path: "notes.txt" } });
    // The model read the file (its answer quotes it); the app's activity events did not carry it.
    expect(result.output).toContain("line one");
    expect(JSON.stringify(acts)).not.toContain("line one");
  });

  it("cancels mid-stream: the run ends cancelled and the claude process is gone", async () => {
    const run = svc.runs.create({ user: "dana", prompt: "Talk slowly [[slow]]" });
    const events: RunEvent[] = [];
    let running: string[] = [];
    for await (const e of run) {
      events.push(e);
      if (e.kind === "text_delta" && events.filter((x) => x.kind === "text_delta").length === 3) {
        running = claudeProcesses();
        await svc.runs.cancel(await run.runId);
      }
    }
    expect(running.length).toBeGreaterThan(0);
    const result = await run.result();
    expect(result.status).toBe("cancelled");
    expect(textOf(events).length).toBeLessThan("word ".repeat(200).length / 2);
    await pollUntil(async () => claudeProcesses(), (left) => left.length === 0, 10_000, "the claude process to end");
  });

  it("fails an API error with its own code; the error text is not run text", async () => {
    const run = svc.runs.create({ user: "dana", prompt: "Break [[status:400]]" });
    const events = await collect(run);
    const result = await run.result();
    expect(result).toMatchObject({ status: "failed", error: { code: "api_error_400" } });
    expect(result.error?.message).toContain("the stand-in refuses this request");
    expect(textOf(events)).toBe("");
  });

  it("shows the CLI's retries of a failing model API as activity, then completes", async () => {
    const run = svc.runs.create({ user: "dana", prompt: "Overloaded once [[status:529x1]]" });
    const events = await collect(run);
    const result = await run.result();
    expect(result).toMatchObject({ status: "completed", output: DEFAULT_ANSWER });
    const retry = activities(events).find((a) => a.summary.includes("retry"));
    expect(retry).toMatchObject({ summary: expect.stringMatching(/^the model API failed \(HTTP 529\): retry 1 of 10 in \d+\.\d s$/), detail: { attempt: 1, maxRetries: 10, errorStatus: 529 } });
  });

  it("offers the app's tools through the MCP bridge: a call reaches the SDK's handler, its result the model", async () => {
    const calls: unknown[] = [];
    const run = svc.runs.create({
      user: "dana",
      prompt: 'Weather please [[tool:weather {"city":"Paris"}]]',
      system: "Answer in one line.",
      tools: [{ name: "weather", description: "Today's weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, run: (args) => (calls.push(args), "sunny, 21 C") }],
    });
    const events = await collect(run);
    const result = await run.result();
    expect(result).toMatchObject({ status: "completed", output: "The tool said: sunny, 21 C" });
    expect(calls).toEqual([{ city: "Paris" }]);
    expect(events.filter((e) => e.kind === "tool_call")).toEqual([expect.objectContaining({ name: "weather", arguments: { city: "Paris" } })]);
    // Claude Code saw the tool as the app described it, and the run's system prompt; it asked no permission for it.
    const sent = anthropic.messages().at(-1)!;
    expect(sent.tools?.find((t) => t.name === "mcp__app__weather")).toMatchObject({ description: "Today's weather in a city", input_schema: { required: ["city"] } });
    expect(JSON.stringify(sent.system)).toContain("Answer in one line.");
    expect(events.some((e) => e.kind === "approval_request")).toBe(false);
  });

  it("asks the app before a tool marked needsApproval: denied, the tool never runs and the model hears why", async () => {
    let ran = false;
    const asked: string[] = [];
    const run = svc.runs.create({
      user: "dana",
      prompt: "Launch it [[tool:launch]]",
      tools: [{ name: "launch", needsApproval: true, run: () => ((ran = true), "launched") }],
      onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), { decision: "deny", reason: "not this one" }),
    });
    const events = await collect(run);
    const result = await run.result();
    expect(asked).toEqual(["tool:launch"]);
    expect(ran).toBe(false);
    expect(events.some((e) => e.kind === "tool_call")).toBe(false);
    expect(result.status).toBe("completed");
    expect(result.output).toMatch(/^The tool said: .*not this one/);
  });

  it("keeps a file outside the working folder unread, even when the app allows everything (the sandbox, not the CLI, enforces it)", async () => {
    const key = "PRIVATE-KEY-THAT-MUST-NOT-LEAK";
    fs.mkdirSync(path.join(claudeHome, ".ssh"), { recursive: true });
    fs.writeFileSync(path.join(claudeHome, ".ssh", "id_rsa"), key);
    for (const prompt of [`Read it [[read:${claudeHome}/.ssh/id_rsa]]`, `Cat it [[bash:cat ${claudeHome}/.ssh/id_rsa]]`]) {
      const run = svc.runs.create({ user: "dana", prompt, onApproval: () => true });
      const events = await collect(run);
      expect((await run.result()).status).toBe("completed");
      expect(JSON.stringify(events)).not.toContain(key);
    }
    for (const r of anthropic.requests) expect(r.body).not.toContain(key);
  });

  it("never lets a variable of the worker's environment outside the allowlist reach the CLI", async () => {
    const run = svc.runs.create({ user: "dana", prompt: 'Show it [[bash:echo "secret=($SECRET_X)"]]', onApproval: () => true });
    await collect(run);
    expect((await run.result()).output).toBe("The tool said: secret=()");
    // Nor did anything else the CLI sent the model API carry it.
    for (const r of anthropic.requests) expect(r.body).not.toContain(SECRET);
  });
});

/**
 * The runtime alone (no server), still on the real CLI and the stand-in: what the
 * service does not show yet or cannot ask for — the CLI withdrawing a permission
 * request, how the process is started, a local model.
 */
describe("ClaudeCodeRuntime on the real CLI", () => {
  let anthropic: AnthropicStandIn;
  let home: string;
  let workdir: string;

  beforeAll(async () => {
    anthropic = await startAnthropicStandIn();
    home = fs.realpathSync(tempDir("svc-claude-rt-home-"));
    workdir = fs.realpathSync(tempDir("svc-claude-rt-work-"));
  });
  afterAll(async () => {
    await anthropic?.close();
    removeTempDirs();
  });

  /** Runs one job; `ask` answers permission requests (with the job's abort controller at hand). */
  async function runJob(
    prompt: string,
    ask: (abort: AbortController) => Promise<{ allow: boolean }>,
    options: AgentRuntimeOptions = {},
    app: { tools?: Extract<Job, { kind: "agent_run" }>["tools"]; system?: string; callTool?: JobContext["callTool"] } = {},
  ) {
    const events: JobEvent[] = [];
    const withdrawn: string[] = [];
    const launched: AgentProcess[] = [];
    const abort = new AbortController();
    const policy = machinePolicy(Policy.parse({ env: ["ANTHROPIC_BASE_URL"], providerKeys: ["ANTHROPIC_API_KEY"] }), { PATH: process.env.PATH, HOME: home, ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin" });
    const ctx: JobContext = {
      emit: (e) => events.push(e),
      signal: abort.signal,
      askPermission: () => ask(abort),
      withdrawPermission: (id) => withdrawn.push(id),
      callTool: app.callTool ?? (async () => ({ output: "no tools here", isError: true })),
      launch: (p) => (launched.push(p), policy.launch(p)),
      commandOutput: "summary",
      allowedEnv: policy.allowedEnv,
    };
    const runtime = new ClaudeCodeRuntime({ name: "claude-code", kind: "agent", costClass: "user_subscription", models: [] }, CLAUDE, workdir, options);
    await runtime.run({ kind: "agent_run", runtime: "claude-code", prompt, ...(app.tools ? { tools: app.tools } : {}), ...(app.system ? { system: app.system } : {}) }, ctx);
    return { events, withdrawn, launched: launched[0] };
  }

  it("starts the CLI pinned: default permission mode, no settings files, only our MCP config, quiet, HOME's state writable", async () => {
    // Settings that would let every command run unasked, were they read (the folder's are also ignored by 2.1.197 in an untrusted folder; the user's are not).
    for (const dir of [workdir, home]) {
      fs.mkdirSync(path.join(dir, ".claude"), { recursive: true });
      fs.writeFileSync(path.join(dir, ".claude", "settings.json"), JSON.stringify({ permissions: { allow: ["Bash"] } }));
    }
    let asked = 0;
    const { events, launched } = await runJob("Write [[bash:echo x > pinned.txt]]", async () => (asked++, { allow: false }));
    expect(asked).toBe(1);
    expect(fs.existsSync(path.join(workdir, "pinned.txt"))).toBe(false);
    expect(events.at(-1)).toMatchObject({ type: "done" });
    const flag = (name: string) => launched.args[launched.args.indexOf(name) + 1];
    expect(flag("--permission-mode")).toBe("default");
    expect(flag("--setting-sources")).toBe("");
    expect(flag("--permission-prompt-tool")).toBe("stdio");
    expect(launched.args).toContain("--strict-mcp-config");
    expect(launched.args).toContain("--include-partial-messages");
    expect(launched).toMatchObject({
      cwd: workdir,
      env: { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_AUTOUPDATER: "1", DISABLE_TELEMETRY: "1", DISABLE_ERROR_REPORTING: "1" },
      writable: [path.join(home, ".claude"), path.join(home, ".claude.json")],
      modelApis: [anthropic.url],
    });
  });

  it("withdraws a permission request the CLI cancels (a cancelled run interrupts it first); nothing ran", async () => {
    const { events, withdrawn } = await runJob("Write [[bash:echo x > withdrawn.txt]]", (abort) => (setTimeout(() => abort.abort(), 100), new Promise(() => {})));
    expect(withdrawn).toHaveLength(1);
    // The model call's tokens are told as it goes (`usage`); besides them, only the end.
    expect(events.filter((e) => e.type !== "usage")).toEqual([{ type: "failed", code: "cancelled", message: "The job was cancelled." }]);
    expect(fs.existsSync(path.join(workdir, "withdrawn.txt"))).toBe(false);
  });

  it("offers the app's tools through the MCP bridge without a CLI permission prompt; the bridge is gone after the run", async () => {
    const calls: unknown[] = [];
    let asked = 0;
    const { events, launched } = await runJob(
      'Weather [[tool:weather {"city":"Oslo"}]]',
      async () => (asked++, { allow: false }),
      {},
      {
        tools: [{ name: "weather", description: "Today's weather", parameters: { type: "object", properties: { city: { type: "string" } } } }],
        system: "--be-brief",
        callTool: async (call) => (calls.push(call), { output: `snow in ${JSON.parse(call.arguments).city}`, isError: false }),
      },
    );
    expect(asked).toBe(0);
    expect(calls).toEqual([{ id: expect.stringMatching(/^mcp_/), name: "weather", arguments: '{"city":"Oslo"}' }]);
    expect(events.at(-1)).toMatchObject({ type: "done", output: "The tool said: snow in Oslo" });
    // The run's system prompt (a value that looks like a flag stays a value), and the tool as the app described it.
    const sent = anthropic.messages().at(-1)!;
    expect(JSON.stringify(sent.system)).toContain("--be-brief");
    expect(sent.tools?.find((t) => t.name === "mcp__app__weather")).toMatchObject({ description: "Today's weather" });
    const config = launched.args[launched.args.indexOf("--mcp-config") + 1];
    expect(launched.args.slice(launched.args.indexOf("--allowedTools") + 1)).toEqual(["mcp__app__weather"]);
    // The first request waits for the bridge (in print mode the CLI would go ahead without it after 5 s, offering none of the app's tools).
    expect(launched.env).toMatchObject({ MCP_CONNECTION_NONBLOCKING: "false", MCP_CONNECT_TIMEOUT_MS: "60000" });
    // The private config folder and the bridge's socket folder are removed with the run.
    expect(fs.existsSync(config)).toBe(false);
    for (const dir of launched.writable!.filter((w) => w.includes("svc-bridge-"))) expect(fs.existsSync(dir)).toBe(false);
  });

  it("points the CLI at a local Anthropic-compatible model: its URL, its model, no Anthropic key sent", async () => {
    const before = anthropic.requests.length;
    const { events, launched } = await runJob("Hi", async () => ({ allow: false }), { localModel: { baseUrl: anthropic.url, model: "qwen3:8b" } });
    // One model call: its usage as the API reported it, cache reads and writes apart.
    expect(events.at(-1)).toEqual({
      type: "done",
      finishReason: "end_turn",
      output: DEFAULT_ANSWER,
      usage: { inputTokens: USAGE.input_tokens, cacheReadTokens: USAGE.cache_read_input_tokens, cacheWriteTokens: USAGE.cache_creation_input_tokens, outputTokens: USAGE.output_tokens },
    });
    expect(launched.modelApis).toContain(anthropic.url);
    const sent = anthropic.requests.slice(before).filter((r) => r.method === "POST");
    expect(sent.length).toBeGreaterThan(0);
    for (const r of sent) {
      expect(JSON.parse(r.body).model).toBe("qwen3:8b");
      expect(r.headers["x-api-key"]).toBeUndefined();
      expect(r.headers.authorization).toBe("Bearer local-model");
    }
  });
});

/**
 * Claude Code on the user's own model: the same real CLI, pointed by the worker's
 * config (`runtimes.localAgents`) at a local Anthropic-compatible server (here
 * the stand-in, as Ollama would serve one). It is its own runtime,
 * `claude-code-local`, routed under `user-hardware` and metered as `user_hardware`;
 * the subscription one stays under `user-subscription`.
 */
describe("Claude Code on the user's local model, through the SDK", () => {
  let server: TestServer;
  let local: AnthropicStandIn;
  let svc: Svc;
  let worker: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    local = await startAnthropicStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    const machine = await pairViaApi(server, server.dev, "lena", {
      workdir: fs.realpathSync(tempDir("svc-claude-local-work-")),
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false, claude: CLAUDE, localAgents: { "claude-code": { url: local.url, model: "qwen3-coder:30b" } } },
      policy: { agents: { "claude-code": true }, sandbox: { required: false } },
    });
    // An Anthropic key in the worker's environment, not allowed through: neither run may use it.
    worker = spawnWorker(["start"], machine.home, { HOME: fs.realpathSync(tempDir("svc-claude-local-home-")), ANTHROPIC_API_KEY: "sk-ant-not-for-you" });
    await worker.waitFor(/Connected/);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await local?.close();
  });

  it("the machine serves two runtimes: on the local model (user_hardware) and on the subscription (user_subscription)", async () => {
    const res = await server.fetch("/v1/users/lena/compute", { headers: { authorization: `Bearer ${server.dev.appKey}` } });
    const compute = (await res.json()) as { machines: { runtimes: { name: string; kind: string; costClass: string; billing: string | null; models: string[]; version: string | null }[] }[] };
    const runtimes = compute.machines[0].runtimes.map(({ name, kind, costClass, billing, models }) => ({ name, kind, costClass, billing, models }));
    expect(runtimes.sort((a, b) => a.name.localeCompare(b.name))).toEqual([
      { name: "claude-code", kind: "agent", costClass: "user_subscription", billing: "subscription", models: [] },
      { name: "claude-code-local", kind: "agent", costClass: "user_hardware", billing: "local_model", models: ["qwen3-coder:30b"] },
    ]);
  });

  it("a run under user-hardware goes to the CLI on the local model: its model asked, no Anthropic key sent, metered user_hardware", async () => {
    const before = local.requests.length;
    const run = svc.runs.create({ user: "lena", prompt: "Say hello", route: { prefer: ["user-hardware"] } });
    const events: RunEvent[] = [];
    for await (const e of run) events.push(e);
    expect(events[0]).toMatchObject({ kind: "run_started", route: "user-hardware", costClass: "user_hardware", runtime: "claude-code-local", billing: "local_model" });
    expect(events.at(-1)).toMatchObject({ kind: "run_completed", output: DEFAULT_ANSWER, usage: { costClass: "user_hardware" } });
    const sent = local.requests.slice(before).filter((r) => r.method === "POST");
    expect(sent.length).toBeGreaterThan(0);
    for (const r of sent) {
      expect(JSON.parse(r.body).model).toBe("qwen3-coder:30b");
      expect(r.headers["x-api-key"]).toBeUndefined();
      expect(JSON.stringify(r.headers)).not.toContain("sk-ant-not-for-you");
    }
    const rows = await server.db.prisma.usageRow.findMany({ where: { runId: await run.runId } });
    expect(rows.map((r) => r.costClass).sort()).toEqual(rows.map(() => "user_hardware"));
    expect(rows.length).toBeGreaterThan(0);
  });

  it("a run under user-subscription goes to the subscription CLI, said as such", async () => {
    const run = svc.runs.create({ user: "lena", prompt: "Say hello", route: { prefer: ["user-subscription"] } });
    const events: RunEvent[] = [];
    for await (const e of run) events.push(e);
    expect(events[0]).toMatchObject({ kind: "run_started", route: "user-subscription", costClass: "user_subscription", runtime: "claude-code", billing: "subscription" });
  });
});

