import type { ChildProcessWithoutNullStreams } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { AgentRunJob } from "@svc/contract";
import { BRIDGE_TOOL_TIMEOUT_SEC, startToolBridge, type ToolBridge } from "../mcp/bridge-host.js";
import { AgentCliRuntime, failed, RESUME_PROMPT, type AgentProcess, type JobContext } from "./runtime.js";
import { runNdjson } from "./ndjson-process.js";
import { ClaudeEvents } from "./claude-events.js";
import { forgetClaudeSession } from "./session-files.js";

/** A user message the CLI said back as it took it (`--replay-user-messages` marks it `isReplay`: checked on 2.1.197), not a tool result. */
const isReplayed = (line: Record<string, unknown>): boolean => line.isReplay === true;

/** Where Claude Code talks to Anthropic unless the allowed environment says otherwise. */
const ANTHROPIC_API = "https://api.anthropic.com";

/** How long a cancelled run has to stop after its interrupt before it is killed. */
const INTERRUPT_GRACE_MS = 3000;

/**
 * Flags pinned on every run, whatever the user's or the folder's own settings say:
 * - `--permission-mode default`: every action outside the CLI's read-only set asks
 *   (through `--permission-prompt-tool stdio`, answered by the machine's policy and the app);
 * - `--setting-sources ""`: no settings file is read at all, neither the project's
 *   and local ones (a folder could turn approvals off, add hooks or allow rules, or
 *   its own skills and agents) nor the user's `~/.claude/settings.json` (2.1.197
 *   accepts the empty list and then loads none: checked). The login is not a setting
 *   (it lives in `~/.claude/.credentials.json` and `~/.claude.json`); what the user set
 *   in their own settings (a model, an `apiKeyHelper`, env) does not apply to runs
 *   served here. An approved write to `.claude/settings.json` changes nothing for later runs;
 * - `--strict-mcp-config`: only the MCP servers given here (the app's tools), not
 *   the folder's `.mcp.json` or the user's;
 *
 * And one of: `--no-session-persistence` (a job that is not resumable: its transcript is
 * not kept under `~/.claude/projects`), or `--session-id <id>` / `--resume <id>` for a job
 * the worker keeps through its own restart (`ctx.session`): the transcript is kept under
 * that id while the job runs and deleted when it ends.
 */
const PINNED_FLAGS = [
  "-p",
  "--output-format",
  "stream-json",
  "--verbose",
  "--input-format",
  "stream-json",
  "--include-partial-messages",
  "--permission-prompt-tool",
  "stdio",
  "--permission-mode",
  "default",
  "--setting-sources",
  "",
  "--strict-mcp-config",
];


/** Set on every run: no update checks, telemetry, error reports or other traffic besides the model API. */
const QUIET_ENV = {
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  DISABLE_AUTOUPDATER: "1",
  DISABLE_TELEMETRY: "1",
  DISABLE_ERROR_REPORTING: "1",
};

/**
 * Claude Code on the user's own subscription (or a provider key the user allowed,
 * or a local Anthropic-compatible model): `claude -p` with stream-json in and out,
 * started through the machine's policy (sandbox, environment allowlist) in the
 * user's working folder. Its permission requests go through the stdio control
 * protocol to the policy and the app; the app's tools are offered through the
 * worker's MCP bridge. What its output means is `ClaudeEvents`' business.
 */
export class ClaudeCodeRuntime extends AgentCliRuntime {
  protected readonly cli = "claude-code";

  /** Its sessions are kept under `~/.claude/projects/<folder>/<id>.jsonl` while a resumable job runs, and after it for a conversation. */
  readonly sessions = { forget: forgetClaudeSession };

  protected async runAgent(job: AgentRunJob, ctx: JobContext): Promise<void> {
    const setup = await this.setUp(job, ctx);
    try {
      await this.runCli(setup.process, ctx.session?.restarted ? RESUME_PROMPT : job.prompt, ctx);
    } finally {
      await setup.cleanup();
      // The CLI ended (its result, a failure, a cancel): a session kept only for the job will not be resumed.
      if (ctx.session && !ctx.session.keep) this.sessions.forget(ctx.session.id, ctx.allowedEnv);
    }
  }

  /** The process to start, with the app's tools (if any) offered through a bridge that lives as long as the run. */
  private async setUp(job: AgentRunJob, ctx: JobContext): Promise<{ process: AgentProcess; cleanup: () => Promise<void> }> {
    // `--replay-user-messages`: each user message is said back when the CLI takes it, so the worker knows when every message it wrote was answered.
    const args = [...PINNED_FLAGS, "--replay-user-messages"];
    // Kept under the job's id (its UUID) only for a job the worker can resume after a restart.
    if (ctx.session) args.push(ctx.session.resume ? "--resume" : "--session-id", ctx.session.id);
    else args.push("--no-session-persistence");
    const env: Record<string, string> = { ...QUIET_ENV };
    const readable: string[] = [];
    const writable: string[] = [];
    const local = this.options.localModel;
    // On a local model the only model API the CLI may reach is that server.
    const modelApis = local ? [] : [ctx.allowedEnv.ANTHROPIC_BASE_URL || ANTHROPIC_API];
    if (local) {
      // A local server wants no Anthropic key (and must not be sent one); the background
      // models Claude Code would pick (Haiku for small tasks, subagents) are the local one too.
      Object.assign(env, { ANTHROPIC_BASE_URL: local.baseUrl, ANTHROPIC_AUTH_TOKEN: local.apiKey ?? "local-model", ANTHROPIC_API_KEY: "" });
      if (local.model) {
        for (const name of ["ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"]) env[name] = local.model;
      }
      modelApis.push(local.baseUrl);
    }
    const model = job.model ?? local?.model;
    // `--flag=value`: a value starting with `-` stays a value.
    if (model) args.push(`--model=${model}`);
    if (job.system) args.push(`--append-system-prompt=${job.system}`);

    // What the CLI needs of HOME: its state folder and its config file (login, first-run flags).
    const home = ctx.allowedEnv.HOME || os.homedir();
    fs.mkdirSync(path.join(home, ".claude"), { recursive: true });
    writable.push(path.join(home, ".claude"), path.join(home, ".claude.json"));

    let bridge: ToolBridge | null = null;
    let configDir: string | null = null;
    const cleanup = async () => {
      await bridge?.close();
      if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
    };
    try {
      if (job.tools?.length) {
        bridge = await startToolBridge(job.tools, ctx.callTool);
        configDir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-claude-"));
        fs.chmodSync(configDir, 0o700);
        const config = path.join(configDir, "mcp.json");
        fs.writeFileSync(config, JSON.stringify({ mcpServers: { [bridge.name]: { type: "stdio", ...bridge.server } } }), { mode: 0o600 });
        // Listed tools run without a CLI permission prompt: the service asks the app for those marked needsApproval.
        args.push("--mcp-config", config, "--allowedTools", ...bridge.toolNames.map((t) => `mcp__${bridge!.name}__${t}`));
        env.MCP_TOOL_TIMEOUT = String(BRIDGE_TOOL_TIMEOUT_SEC * 1000);
        // The bridge starts in a second or two, more on a busy machine. In print mode the
        // CLI goes ahead without a server not connected after 5 s (its tools simply
        // missing from the first request): it waits for ours, up to a minute.
        env.MCP_TIMEOUT = "60000";
        env.MCP_CONNECTION_NONBLOCKING = "false";
        env.MCP_CONNECT_TIMEOUT_MS = "60000";
        readable.push(configDir, ...bridge.readable);
        writable.push(...bridge.writable);
      }
    } catch (err) {
      await cleanup();
      throw err;
    }
    return { process: { command: this.command, args, cwd: this.workdir, env, readable, writable, modelApis }, cleanup };
  }

  private async runCli(agent: AgentProcess, prompt: string, ctx: JobContext): Promise<void> {
    // A cancelled run is first asked to stop (the CLI withdraws its open requests and ends
    // its tools), and killed only if it has not within the grace.
    const kill = new AbortController();
    let child: ChildProcessWithoutNullStreams | null = null;
    const write = (message: unknown) => child?.stdin.writable && child.stdin.write(`${JSON.stringify(message)}\n`);
    const events = new ClaudeEvents(ctx, write);
    // User messages written (the prompt, then any the user sends while it works) and those the CLI took: its stdin is
    // closed (it exits) at a result only once it took every one; one taken later gets a turn (and a result) of its own.
    let written = 0;
    let taken = 0;
    let closed = false;
    const say = (text: string) => {
      if (closed) return;
      written++;
      write({ type: "user", message: { role: "user", content: [{ type: "text", text }] }, parent_tool_use_id: null });
    };
    let graceTimer: NodeJS.Timeout | null = null;
    const onCancel = () => {
      events.interrupt();
      graceTimer = setTimeout(() => kill.abort(), INTERRUPT_GRACE_MS);
    };
    const started = runNdjson(await ctx.launch(agent), kill.signal, (line, proc) => {
      // A user message said back (`--replay-user-messages`): taken, not an event of the run.
      if (line.type === "user" && isReplayed(line)) return void taken++;
      events.onLine(line);
      // The CLI waits for more input after its result: closing stdin lets it exit, once every message written was taken.
      // (A CLI that says nothing back, taken 0, exits at its first result, as before.)
      if (line.type === "result" && (taken >= written || taken === 0)) {
        closed = true;
        proc.stdin.end();
      }
    });
    child = started.child;
    if (ctx.signal.aborted) kill.abort();
    else ctx.signal.addEventListener("abort", onCancel, { once: true });
    say(prompt);
    ctx.onUserMessage?.(say);
    const { code, stderr } = await started.exited;
    ctx.signal.removeEventListener("abort", onCancel);
    if (graceTimer) clearTimeout(graceTimer);
    if (ctx.signal.aborted) return ctx.emit(failed("cancelled", "The job was cancelled."));
    // A session the CLI never saved (killed before it wrote its transcript) cannot be resumed: the job is not held.
    const outcome = events.outcome;
    if (ctx.session?.resume && outcome?.type === "failed" && /No conversation found/i.test(outcome.message)) {
      if (!ctx.session.restarted) return ctx.emit({ ...outcome, code: "session_not_found", message: "Claude Code has no saved session of this conversation on the user's machine (it was deleted)." });
      return ctx.emit({ ...outcome, code: "job_not_held", message: `Claude Code had not saved its session before the worker restarted: ${outcome.message}` });
    }
    if (outcome) return ctx.emit(outcome);
    ctx.emit(failed("runtime_error", `claude exited (${code}) without a result${stderr ? `: ${stderr.trim().slice(-500)}` : ""}`));
  }
}
