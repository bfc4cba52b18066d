import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, ROOT } from "../helpers/process.js";
import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { CodexRuntime } from "../../worker/src/runtimes/codex.js";
import type { AgentProcess, JobContext, Launched } from "../../worker/src/runtimes/runtime.js";
import { RESPONSES_USAGE, startResponsesStandIn, WINDOW_RESETS_AT, type ResponsesStandIn } from "../helpers/responses-standin.js";
import { CODEX_BIN } from "../../scripts/test-tools.mjs";
import { serverBehindLink, type Link } from "../helpers/link.js";

const CODEX = CODEX_BIN;

/**
 * The real Codex CLI (`@openai/codex` 0.169.0 from npm) on a user's machine: a
 * real `svc-worker start` drives `codex app-server` inside the sandbox, against a
 * stand-in of the OpenAI Responses API on 127.0.0.1; the app is the SDK.
 */
/** Codex runs inside the sandbox: a machine without bubblewrap skips this file, CI (SVC_TEST_SANDBOX=1) requires it. */
const sandboxed = detectSandbox().kind !== null || process.env.SVC_TEST_SANDBOX === "1";

describe.runIf(sandboxed)("the real Codex CLI through svc-worker", () => {
  let server: TestServer;
  let api: ResponsesStandIn;
  let svc: Svc;
  let worker: WorkerProcess;
  let root: string;
  let home: string;
  let workdir: string;
  /** Starts the machine's worker (again). */
  let startWorker: () => WorkerProcess;
  let link: Link;
  let direct: string;

  beforeAll(async () => {
    // The worker reaches the service through a link the test can silence (PUBLIC_URL); the app talks to it directly.
    let serviceApi: Parameters<typeof pairViaApi>[0];
    ({ server, link, direct, api: serviceApi } = await serverBehindLink((env) => startTestServer({ kind: "pglite", dataDir: null }, env, { runningClock: true }), {
      WORKER_HEARTBEAT_TIMEOUT_SECONDS: "3",
      RUN_MACHINE_GRACE_SECONDS: "60",
    }));
    api = await startResponsesStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${direct}/v1` });
    // Codex will not set up its own sandbox with its home under /tmp: this test's folders live in /var/tmp.
    root = fs.mkdtempSync("/var/tmp/svc-codex-");
    home = path.join(root, "home");
    workdir = path.join(root, "project");
    fs.mkdirSync(path.join(home, ".codex"), { recursive: true });
    fs.mkdirSync(path.join(home, ".ssh"), { recursive: true });
    fs.mkdirSync(workdir);
    fs.writeFileSync(path.join(home, ".ssh", "id_rsa"), "PRIVATE-KEY-THAT-MUST-NOT-LEAK");
    fs.writeFileSync(
      path.join(home, ".codex", "config.toml"),
      `model = "standin-model"\nmodel_provider = "standin"\n[model_providers.standin]\nname = "standin"\nbase_url = "${api.url}/v1"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\n`,
    );
    const m = await pairViaApi(serviceApi, server.dev, "cody", {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: CODEX },
      // Full command output in the run's events: what a command printed is what the tests below check.
      policy: { agents: { codex: true }, env: ["CODEX_HOME"], providerKeys: ["STANDIN_API_KEY"], commandOutput: "full" },
    });
    startWorker = () => (worker = spawnWorker(["start"], m.home, { HOME: home, CODEX_HOME: path.join(home, ".codex"), STANDIN_API_KEY: "sk-standin", SECRET_CLOUD_TOKEN: "cloud-secret-value" }));
    await startWorker().waitFor(/Connected/, 60_000);
  }, 120_000);
  afterAll(async () => {
    worker?.stop();
    await link?.close();
    await server?.close();
    await api?.close();
    if (root) fs.rmSync(root, { recursive: true, force: true });
    removeTempDirs();
  });

  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }
  const run = (prompt: string, extra: Partial<Parameters<Svc["runs"]["create"]>[0]> = {}) => svc.runs.create({ user: "cody", prompt, model: "codex", route: { prefer: ["user-subscription"] }, ...extra });
  const codexRunning = () => {
    try {
      return execFileSync("pgrep", ["-f", `${fs.realpathSync(CODEX)} app-server`]).toString().trim().length > 0;
    } catch {
      return false;
    }
  };

  it("a plain run streams Codex's text token by token, with usage that separates cached input", async () => {
    const r = run("Say hello");
    const events = await collect(r);
    const deltas = events.filter((e) => e.kind === "text_delta");
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.map((e) => (e as { text: string }).text).join("")).toBe("Hello from the Responses stand-in.");
    const end = events.at(-1) as Extract<RunEvent, { kind: "run_completed" }>;
    expect(end.kind).toBe("run_completed");
    expect(end.output).toBe("Hello from the Responses stand-in.");
    expect(end.usage).toMatchObject({ inputTokens: RESPONSES_USAGE.input_tokens - RESPONSES_USAGE.cached_tokens, outputTokens: RESPONSES_USAGE.output_tokens, costClass: "user_subscription" });
    // The CLI saw only the allowed environment: the worker's secret never reached the model API's requests.
    expect(JSON.stringify(api.requests)).not.toContain("cloud-secret-value");
  });

  type Activity = { kind: "activity"; summary: string; detail?: { command?: string; exitCode?: number | null; output?: string } };
  const activities = (events: RunEvent[]) => events.filter((e) => e.kind === "activity") as unknown as Activity[];

  it("an ordinary command in the working folder runs without an approval, and what it prints reaches the run's events", async () => {
    // Issue 29: Codex's own sandbox could not start inside the worker's, and every ordinary command failed.
    fs.writeFileSync(path.join(workdir, "listed-file.txt"), "listed\n");
    fs.writeFileSync(path.join(workdir, "probe.sh"), 'echo "probe says $((6 * 7)) from $(pwd)"\n');
    const asked: string[] = [];
    const events = await collect(run("[shell:ls; sh probe.sh]", { onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), false) }));
    expect(asked).toEqual([]);
    expect(events.some((e) => e.kind === "approval_request")).toBe(false);
    const ran = activities(events).find((a) => a.detail?.command?.includes("sh probe.sh"));
    expect(ran?.summary).toContain("(exit 0)");
    expect(ran?.detail?.exitCode).toBe(0);
    expect(ran?.detail?.output).toContain("listed-file.txt");
    expect(ran?.detail?.output).toContain("probe.sh");
    expect(ran?.detail?.output).toContain(`probe says 42 from ${workdir}`);
    expect(ran?.detail?.output).not.toContain("bwrap");
    const end = events.at(-1) as Extract<RunEvent, { kind: "run_completed" }>;
    expect(end.kind).toBe("run_completed");
    // The model was handed the same output (the stand-in answers with what the command printed).
    expect(end.output).toContain(`probe says 42 from ${workdir}`);
  });

  it("an ordinary command reads and writes the working folder, and neither ~/.ssh nor a file outside the folder, even with the app allowing everything", async () => {
    const outside = path.join(root, "outside");
    fs.mkdirSync(outside, { recursive: true });
    fs.writeFileSync(path.join(outside, "secret.txt"), "OUTSIDE-SECRET-THAT-MUST-NOT-LEAK");
    fs.writeFileSync(path.join(workdir, "inside.txt"), "INSIDE-CONTENT");
    const key = path.join(home, ".ssh", "id_rsa");
    // One ordinary (not escalated) command: the positive controls inside the folder, then each way out of it.
    const script = [
      "cat inside.txt && echo ' read-inside-ok'",
      "echo made-by-codex > made-by-codex.txt && echo write-inside-ok",
      `cat ${key} || echo read-ssh-refused`,
      `cat ${outside}/secret.txt || echo read-outside-refused`,
      `echo tampered >> ${key} || echo write-ssh-refused`,
      `echo escaped > ${outside}/escape.txt || echo write-outside-refused`,
    ].join("; ");
    const asked: string[] = [];
    const events = await collect(run(`[shell:${script}]`, { onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), true) }));
    expect(asked).toEqual([]);
    expect(events.at(-1)!.kind).toBe("run_completed");
    const output = activities(events).find((a) => a.detail?.command?.includes("read-inside-ok"))?.detail?.output ?? "";
    // Each marker on its own: Codex gathers the command's stdout and stderr from two pipes, so a refusal's message may land between two writes of stdout.
    for (const marker of ["INSIDE-CONTENT", "read-inside-ok", "write-inside-ok", "read-ssh-refused", "read-outside-refused", "write-ssh-refused", "write-outside-refused"]) expect(output).toContain(marker);
    expect(fs.readFileSync(path.join(workdir, "made-by-codex.txt"), "utf8")).toBe("made-by-codex\n");
    expect(fs.readFileSync(key, "utf8")).toBe("PRIVATE-KEY-THAT-MUST-NOT-LEAK");
    expect(fs.existsSync(path.join(outside, "escape.txt"))).toBe(false);
    for (const secret of ["PRIVATE-KEY-THAT-MUST-NOT-LEAK", "OUTSIDE-SECRET-THAT-MUST-NOT-LEAK"]) {
      expect(JSON.stringify(events)).not.toContain(secret);
      expect(JSON.stringify(api.requests)).not.toContain(secret);
    }
  });

  it("a command Codex counts as dangerous is an approval the app decides: denied does not run, allowed runs; leaving its sandbox asks nothing, the machine's is the only one", async () => {
    fs.mkdirSync(path.join(workdir, "doomed-denied"));
    fs.mkdirSync(path.join(workdir, "doomed-allowed"));
    const asked: string[] = [];
    const denied = await collect(run("[shell:rm -rf doomed-denied]", { onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), false) }));
    expect(asked).toEqual(["permission:command_execution"]);
    expect(denied.at(-1)!.kind).toBe("run_completed");
    expect(fs.existsSync(path.join(workdir, "doomed-denied"))).toBe(true);

    asked.length = 0;
    const allowed = await collect(run("[shell:rm -rf doomed-allowed]", { onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), true) }));
    expect(asked).toEqual(["permission:command_execution"]);
    expect(allowed.at(-1)!.kind).toBe("run_completed");
    expect(activities(allowed).find((a) => a.detail?.command?.includes("rm -rf doomed-allowed"))?.summary).toContain("(exit 0)");
    expect(fs.existsSync(path.join(workdir, "doomed-allowed"))).toBe(false);

    // Codex has no sandbox of its own inside the worker's: a request to escalate out of it runs without asking, still
    // inside the worker's (where the folders above the working folder are the sandbox's own, gone with it).
    asked.length = 0;
    const marker = path.join(root, "escalated-marker");
    const escalated = await collect(run(`[escalate:touch ${marker}]`, { onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), true) }));
    expect(asked).toEqual([]);
    expect(escalated.at(-1)!.kind).toBe("run_completed");
    expect(activities(escalated).some((a) => a.detail?.command?.includes(`touch ${marker}`))).toBe(true);
    expect(fs.existsSync(marker)).toBe(false);
  });

  it("an app tool is offered through the MCP bridge and answered by the SDK; a needsApproval tool denied never runs", async () => {
    const seen: unknown[] = [];
    const events = await collect(run("[tool:lookup_order] Where is order 42?", { tools: [{ name: "lookup_order", description: "Finds an order.", parameters: { type: "object", properties: { id: { type: "string" } } }, run: (args) => (seen.push(args), { status: "shipped" }) }] }));
    expect(seen).toEqual([{ id: "42" }]);
    expect(events.find((e) => e.kind === "tool_call")).toMatchObject({ name: "lookup_order", arguments: { id: "42" } });
    expect((events.at(-1) as { output: string }).output).toContain("shipped");

    let ran = false;
    const denied = await collect(run("[tool:refund] Refund it", { tools: [{ name: "refund", needsApproval: true, run: () => ((ran = true), "refunded") }], onApproval: () => ({ decision: "deny", reason: "not today" }) }));
    expect(ran).toBe(false);
    expect(denied.some((e) => e.kind === "tool_call")).toBe(false);
    expect(denied.at(-1)!.kind).toBe("run_completed");
  });

  it("a file outside the working folder stays unread even when the app allows everything", async () => {
    const events = await collect(run(`[escalate:cat ${path.join(home, ".ssh", "id_rsa")}]`, { onApproval: () => true }));
    expect(JSON.stringify(events)).not.toContain("PRIVATE-KEY-THAT-MUST-NOT-LEAK");
    expect(JSON.stringify(api.requests)).not.toContain("PRIVATE-KEY-THAT-MUST-NOT-LEAK");
  });

  it("the worker killed (SIGKILL) while Codex waits on the app's tool and started again: Codex picks its saved thread up (thread/resume), the run completes, and the thread is kept after as the user's policy says", async () => {
    let asked = 0;
    const r = run("[tool:weather] Weather before a crash", { tools: [{ name: "weather", run: () => (asked++, new Promise<string>(() => {})) }] });
    const events = collect(r);
    await pollUntil(async () => asked, (n) => n === 1, 60_000, "the tool call");
    // Saved while the job runs: Codex's rollout of the thread.
    const rollouts = () => (fs.existsSync(path.join(home, ".codex", "sessions")) ? (fs.readdirSync(path.join(home, ".codex", "sessions"), { recursive: true }) as string[]).filter((f) => f.endsWith(".jsonl")) : []);
    const sessionsDir = path.join(home, ".codex", "sessions");
    // This run's thread only (the worker notes its id in sessions.json): the earlier runs' threads stay on the machine (sessions.keepDays), some with the same call.
    const sessionId = ((await server.db.prisma.run.findUniqueOrThrow({ where: { id: await r.runId } })).request as { session: { id: string } }).session.id;
    const threadOf = () => {
      try {
        return (JSON.parse(fs.readFileSync(path.join(worker.home, "sessions.json"), "utf8")) as { sessions: { id: string; cliId?: string }[] }).sessions.find((x) => x.id === sessionId)?.cliId ?? null;
      } catch {
        return null;
      }
    };
    await pollUntil(async () => {
      const thread = threadOf();
      return thread !== null && rollouts().some((f) => f.includes(thread) && fs.readFileSync(path.join(sessionsDir, f), "utf8").includes("weather"));
    }, (ok) => ok, 20_000, "Codex's thread saved with the call");
    worker.stop();
    await worker.exited;
    await startWorker().waitFor(/Connected/, 60_000);
    const result = await r.result();
    expect(result.status, JSON.stringify(result)).toBe("completed");
    expect(worker.stdout).toMatch(/↻ job_\w+ resumed after a restart of the worker/);
    const seen = await events;
    expect(seen.filter((e) => e.kind === "tool_call")).toHaveLength(1);
    expect(seen.filter((e) => e.kind === "activity" && (e.detail as { restarted?: boolean } | undefined)?.restarted)).toHaveLength(1);
    // The model saw the same conversation again, then why it stopped.
    const resumedCall = api.requests.find((b) => JSON.stringify(b.input).includes("restarted while you worked"));
    expect(JSON.stringify(resumedCall?.input)).toContain("Weather before a crash");
    // The thread stays as the user's policy says (sessions.keepDays, 7 by default: a follow-up may resume it): listed in
    // the worker's sessions.json with Codex's own thread id, whose rollout is there.
    const id = ((await server.db.prisma.run.findUniqueOrThrow({ where: { id: result.runId } })).request as { session: { id: string } }).session.id;
    const kept = (JSON.parse(fs.readFileSync(path.join(worker.home, "sessions.json"), "utf8")) as { sessions: { id: string; cliId?: string }[] }).sessions.find((x) => x.id === id);
    expect(kept?.cliId).toBeTruthy();
    expect(rollouts().some((f) => f.includes(kept!.cliId!))).toBe(true);
  }, 120_000);

  it("the link cut for 20 s while Codex waits on the app's tool, answered during the cut: the run completes, the call asked once, every event once", async () => {
    let asked = 0;
    let answer!: (v: string) => void;
    const r = run("[tool:weather] Weather through a cut", { tools: [{ name: "weather", run: () => (asked++, new Promise<string>((resolve) => (answer = resolve))) }] });
    const events = collect(r);
    await pollUntil(async () => asked, (n) => n === 1, 60_000, "the tool call");
    const mark = worker.stdout.length;
    link.silence();
    await pollUntil(async () => /keeping job_\w+ for 60 s/.test(worker.stdout.slice(mark)), (ok) => ok, 20_000, "the job kept");
    // The app answers while the machine is away; the service takes it.
    answer("hail, 2 C");
    await new Promise((done) => setTimeout(done, 15_000));
    link.restore();
    const result = await r.result();
    expect(result.status).toBe("completed");
    // The answer given during the cut reached Codex (which notes how long the call took: 20 s).
    expect(result.output).toMatch(/^The tool said: .*hail, 2 C/);
    expect(worker.stdout.slice(mark)).toMatch(/↻ job_\w+ resumed after event \d+/);
    const seen = await events;
    expect(seen.filter((e) => e.kind === "tool_call")).toHaveLength(1);
    const stored = await (await fetch(`${direct}/v1/runs/${await r.runId}/events`, { headers: { authorization: `Bearer ${server.dev.appKey}` } })).text();
    const seqs = [...stored.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    expect(seen.map((e) => e.kind)).toEqual([...stored.matchAll(/^event: (\w+)$/gm)].map((m) => m[1]));
  }, 120_000);

  it("an API error fails the run with the error's own code, and its text is not run text", async () => {
    const events = await collect(run("[error:400] fail please"));
    const end = events.at(-1) as Extract<RunEvent, { kind: "run_failed" }>;
    expect(end.kind).toBe("run_failed");
    // Codex 0.169 does not pass the HTTP status on; the API's own error type is the code.
    expect(end.error.code).toBe("invalid_request_error");
    expect(end.error.message).toBe("The stand-in refused this request (400).");
    expect(events.some((e) => e.kind === "text_delta")).toBe(false);
  });

  it("cancel mid-stream interrupts the turn and leaves no codex process behind", async () => {
    const r = run("[slow] write a lot");
    const events: RunEvent[] = [];
    let cancelled = false;
    for await (const e of r) {
      events.push(e);
      if (!cancelled && events.filter((x) => x.kind === "text_delta").length === 3) {
        cancelled = true;
        await r.cancel("enough");
      }
    }
    expect(events.at(-1)!.kind).toBe("run_cancelled");
    await pollUntil(async () => codexRunning(), (running) => !running, 15_000, "codex to stop");
  });

  // Last in this set: it leaves the machine's codex blocked until the window resets.
  it("Codex's subscription windows (x-codex-* headers) reach the compute read; a spent one fails the run usage_limit_reached naming the reset, and the next run is refused saying so", async () => {
    const auth = { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" };
    const codexLimits = async () =>
      ((await (await server.fetch("/v1/users/cody/compute", { headers: auth })).json()) as { machines: { runtimes: { name: string; limits?: { windows: { window: string; status: string; usedPercent?: number; resetsAt?: string }[] } }[] }[] }).machines[0].runtimes.find((r) => r.name === "codex")?.limits;
    const reset = new Date(WINDOW_RESETS_AT * 1000).toISOString();
    const warned = await collect(run("[window:93] say hello"));
    expect(warned.at(-1)!.kind).toBe("run_completed");
    const shown = await pollUntil(codexLimits, (l) => l?.windows.some((w) => w.window === "5h") === true, 15_000, "codex's windows shown");
    expect(shown!.windows).toContainEqual({ window: "5h", status: "warning", usedPercent: 93, resetsAt: reset });
    expect(shown!.windows).toContainEqual({ window: "7d", status: "allowed", usedPercent: 12, resetsAt: new Date((WINDOW_RESETS_AT + 86_400) * 1000).toISOString() });

    const events = await collect(run("[spent] say hello"));
    const end = events.at(-1) as Extract<RunEvent, { kind: "run_failed" }>;
    expect([end.kind, end.error.code, end.stopReason]).toEqual(["run_failed", "usage_limit_reached", "usage_limit_reached"]);
    expect(end.error.message).toContain(`Codex has used its subscription's 5-hour window; it resets at ${reset}`);
    await pollUntil(codexLimits, (l) => l?.windows.some((w) => w.window === "5h" && w.status === "rejected") === true, 15_000, "the spent window shown");

    const refused = await server.fetch("/v1/runs", { method: "POST", headers: auth, body: JSON.stringify({ user: "cody", prompt: "hi", model: "codex", route: { prefer: ["user-subscription"] } }) });
    expect(refused.status).toBe(409);
    const body = (await refused.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("no_compute");
    expect(body.error.message).toMatch(new RegExp(`codex on cody's .+ has used its subscription's 5-hour window; it resets at ${reset.replace(/\./g, "\\.")}`));
  }, 90_000);
});

/**
 * Which sandbox Codex is told to use, seen at the launch (the real Codex's
 * `app-server`, stopped before it starts): its own `workspace-write` where the
 * worker does not confine it, none inside the worker's sandbox (one
 * confinement, issue 29), and never none outside the worker's.
 */
describe("Codex's own sandbox against the worker's", () => {
  const job = { kind: "agent_run", prompt: "hi", runtime: "codex" } as unknown as Parameters<CodexRuntime["run"]>[0];
  const context = (sandbox: JobContext["sandbox"], launch: JobContext["launch"]): JobContext => ({
    emit: () => {},
    signal: new AbortController().signal,
    askPermission: async () => ({ allow: false }),
    withdrawPermission: () => {},
    callTool: async () => ({ output: "", isError: true }),
    launch,
    commandOutput: "none",
    allowedEnv: { HOME: "/nonexistent-home", CODEX_HOME: "/nonexistent-home/.codex" },
    sandbox,
  });
  const modeOf = (args: string[]) => args.find((a) => a.startsWith("sandbox_mode="));
  const workdir = ROOT;

  it("unconfined (no sandbox here, or a context that does not say), Codex's own workspace-write stays pinned; inside the worker's, Codex is told to use none", async () => {
    for (const [sandbox, mode] of [
      [null, 'sandbox_mode="workspace-write"'],
      [undefined, 'sandbox_mode="workspace-write"'],
      ["bubblewrap", 'sandbox_mode="danger-full-access"'],
      ["seatbelt", 'sandbox_mode="danger-full-access"'],
    ] as const) {
      const seen: AgentProcess[] = [];
      const launch = async (p: AgentProcess): Promise<Launched> => {
        seen.push(p);
        throw new Error("stopped before starting");
      };
      await expect(new CodexRuntime({ name: "codex" } as never, CODEX, workdir).run(job, context(sandbox, launch))).rejects.toThrow("stopped before starting");
      expect(seen[0].args[0]).toBe("app-server");
      expect(modeOf(seen[0].args)).toBe(mode);
      expect(seen[0].args).toContain('approval_policy="on-request"');
    }
  });

  it("told to use no sandbox of its own, Codex is not started when the launch did not confine it", async () => {
    const dir = fs.mkdtempSync("/var/tmp/svc-codex-launch-");
    try {
      const started = path.join(dir, "started");
      let cleaned = false;
      // A launch that forgets the worker's sandbox: the process it returns would leave a mark if started.
      const launch = async (p: AgentProcess): Promise<Launched> => ({ command: "sh", args: ["-c", `touch ${started}`], cwd: p.cwd, env: {}, cleanup: () => void (cleaned = true) });
      await expect(new CodexRuntime({ name: "codex" } as never, CODEX, workdir).run(job, context("bubblewrap", launch))).rejects.toThrow(/did not confine it/);
      expect(cleaned).toBe(true);
      await new Promise((r) => setTimeout(r, 200));
      expect(fs.existsSync(started)).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
