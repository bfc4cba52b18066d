import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { AgentRunJob, JobEvent } from "@svc/contract";
import { BRIDGE_TOOL_TIMEOUT_SEC, startToolBridge, type ToolBridge } from "../mcp/bridge-host.js";
import { BRIDGE_TOKEN_ENV } from "../mcp/wire.js";
import { commandActivity } from "../policy/output.js";
import { CodexRpc } from "./codex-rpc.js";
import { forgetCodexSession } from "./session-files.js";
import { runCodexExec } from "./codex-exec.js";
import { codexWindows, spentMessage, WindowBook } from "./usage-windows.js";
import { AgentCliRuntime, failed, RESUME_PROMPT, type JobContext, type Launch } from "./runtime.js";

/** Codex's own model APIs, reached when its configuration names no other. */
const CODEX_DEFAULT_APIS = ["https://api.openai.com", "https://chatgpt.com"];
/** How long a cancelled turn gets to stop after `turn/interrupt` before the process is stopped. */
const INTERRUPT_GRACE_MS = 3000;
/** How long the bridge may take to start before the turn goes ahead without the app's tools (Codex's default of 10 s is tight on a busy machine). */
const BRIDGE_STARTUP_TIMEOUT_SEC = 60;

type Params = Record<string, unknown>;

/** Codex's own sandbox modes (its `sandbox_mode` setting, app-server's `sandbox`, exec's `--sandbox`). */
export type CodexSandboxMode = "workspace-write" | "danger-full-access";

/**
 * Which sandbox Codex's commands run in: exactly one, never one nested in
 * another (issue 29).
 *
 * Where the worker confines the CLI itself (`ctx.sandbox`: bubblewrap on Linux,
 * Seatbelt on macOS), Codex is told `danger-full-access`: the worker's sandbox
 * is the sandbox, around Codex and every command it runs. Codex's own
 * `workspace-write` cannot run inside it: on Linux it is a second bubblewrap,
 * which must create a user namespace and write its uid map, and that is refused
 * inside the worker's wherever the worker runs as root (mapping uid 0 needs
 * CAP_SETFCAP, which the worker's `--cap-drop ALL` takes away: "bwrap: setting
 * up uid map: Operation not permitted"), where bubblewrap is setuid because
 * unprivileged user namespaces are off, and under Ubuntu's AppArmor
 * restriction of user namespaces; and macOS refuses Seatbelt inside Seatbelt
 * ("sandbox_apply: Operation not permitted", openai/codex#45657). Then every
 * ordinary command fails and only escalated ones run.
 * Making the nesting work instead would mean weakening the worker's sandbox
 * (capabilities or a remapped user namespace for the CLI, and leaving it free
 * to create namespaces: the kernel surface most local privilege escalations
 * go through), and it would still depend on the host's kernel, its security
 * modules and the internals of each Codex release (0.169 already refuses its
 * Landlock fallback under app-server).
 *
 * The confinement that matters holds: the worker's sandbox is the stricter one
 * for reads (Codex's `workspace-write` reads the whole disk; the worker's shows
 * only the system, the working folder and the paths the CLI and the policy
 * need, never the rest of HOME), writes reach only the working folder, Codex's
 * home and the policy's writable paths, and the network is the policy's (by
 * default only the model APIs). What is given up are Codex's finer rules
 * inside that: its commands may now write its home (CODEX_HOME) and the
 * working folder's `.git`, `.codex` and `.agents`, as Codex itself always
 * could there. And with no sandbox of its own to leave, Codex asks no approval
 * to escalate; it still asks before commands it counts as dangerous (`rm -rf`,
 * ...), and those go to the user's policy and then the app as before.
 *
 * Unconfined (no sandbox on this machine and the policy accepts that, or a
 * context that does not say), Codex's own `workspace-write` stays pinned. The
 * launch is checked: Codex told to use no sandbox of its own is never started
 * outside the worker's.
 */
function codexSandbox(ctx: JobContext): { mode: CodexSandboxMode; launch: Launch } {
  const outer = ctx.sandbox ?? null;
  if (outer === null) return { mode: "workspace-write", launch: ctx.launch };
  return {
    mode: "danger-full-access",
    launch: async (p) => {
      const launched = await ctx.launch(p);
      if (launched.sandbox !== outer) {
        await launched.cleanup?.();
        throw new Error(`Codex was to run inside the machine's sandbox (${outer}) with its own turned off, and the launch did not confine it: not started.`);
      }
      return launched;
    },
  };
}

interface Usage {
  inputTokens: number;
  cachedInputTokens: number;
  cacheWriteInputTokens: number;
  outputTokens: number;
}

/**
 * Codex on the user's own subscription (or the user's local model), through
 * `codex app-server`: JSON-RPC over stdio with threads, turns, interrupt, token
 * usage and, above all, approvals: each command or file change Codex wants to
 * make outside its sandbox, or counts as dangerous, becomes a permission
 * request (the user's policy first, then the app). Approval policy and sandbox
 * are pinned on every start (`on-request`; `workspace-write`, or
 * `danger-full-access` inside the worker's own sandbox: see `codexSandbox`),
 * so no configuration file of the user's or the folder's can turn the asking
 * off. Where app-server is missing (older Codex), `codex exec --json` is the
 * fallback: it asks nothing.
 */
export class CodexRuntime extends AgentCliRuntime {
  protected readonly cli = "codex";

  /**
   * A resumable job's thread is kept (not `ephemeral`) while the job runs: its rollout file under
   * `CODEX_HOME/sessions/<yyyy>/<mm>/<dd>/rollout-<time>-<thread>.jsonl`, deleted when the job ends.
   */
  readonly sessions = { forget: forgetCodexSession };

  protected async runAgent(job: AgentRunJob, ctx: JobContext): Promise<void> {
    // Its thread cannot be picked up without the id Codex gave it (it was never said), nor without app-server.
    if (ctx.session?.resume && (!ctx.session.cliId || !hasAppServer(this.command))) {
      if (!ctx.session.restarted) return ctx.emit(failed("session_not_found", "Codex has no saved thread of this conversation on the user's machine."));
      return ctx.emit(failed("job_not_held", "Codex's thread of this job was not saved before the worker restarted: it cannot be resumed."));
    }
    const home = ctx.allowedEnv.CODEX_HOME ?? path.join(ctx.allowedEnv.HOME ?? os.homedir(), ".codex");
    const local = this.options.localModel;
    const modelApis = local ? [local.baseUrl] : configuredApis(home);
    const sandbox = codexSandbox(ctx);
    const overrides = ["approval_policy=\"on-request\"", `sandbox_mode="${sandbox.mode}"`];
    if (local) {
      overrides.push(
        'model_provider="svc_local"',
        `model_providers.svc_local={ name = "local model", base_url = ${JSON.stringify(`${local.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "")}/v1`)}, wire_api = "responses"${local.apiKey ? ', env_key = "SVC_LOCAL_MODEL_KEY"' : ""} }`,
      );
    }
    const jobCtx: JobContext = { ...ctx, launch: sandbox.launch };
    if (!hasAppServer(this.command)) return runCodexExec(this.command, this.workdir, job, jobCtx, { writable: [home], modelApis, model: job.model ?? local?.model, overrides, sandboxMode: sandbox.mode });

    let bridge: ToolBridge | null = null;
    if (job.tools?.length) {
      bridge = await startToolBridge(job.tools, ctx.callTool);
      const prefix = `mcp_servers.${bridge.name}`;
      overrides.push(
        `${prefix}.command=${JSON.stringify(bridge.server.command)}`,
        `${prefix}.args=[${bridge.server.args.map((a) => JSON.stringify(a)).join(", ")}]`,
        // The token travels in the environment (never on a command line, where `ps` shows it).
        `${prefix}.env_vars=[${JSON.stringify(BRIDGE_TOKEN_ENV)}]`,
        `${prefix}.tool_timeout_sec=${BRIDGE_TOOL_TIMEOUT_SEC}`,
        `${prefix}.startup_timeout_sec=${BRIDGE_STARTUP_TIMEOUT_SEC}`,
        // The service asks the app for tools marked needsApproval: Codex asking too would ask twice.
        `${prefix}.default_tools_approval_mode="approve"`,
      );
    }
    try {
      await this.appServer(job, jobCtx, { home, modelApis, overrides, bridge, sandboxMode: sandbox.mode });
    } finally {
      await bridge?.close();
    }
  }

  private async appServer(job: AgentRunJob, ctx: JobContext, o: { home: string; modelApis: string[]; overrides: string[]; bridge: ToolBridge | null; sandboxMode: CodexSandboxMode }): Promise<void> {
    const launched = await ctx.launch({
      command: this.command,
      args: ["app-server", ...o.overrides.flatMap((c) => ["-c", c])],
      cwd: this.workdir,
      env: { ...(o.bridge?.server.env ?? {}), ...(this.options.localModel?.apiKey ? { SVC_LOCAL_MODEL_KEY: this.options.localModel.apiKey } : {}) },
      writable: [o.home, ...(o.bridge?.writable ?? [])],
      readable: o.bridge?.readable ?? [],
      modelApis: o.modelApis,
    });
    const child = spawn(launched.command, launched.args, { cwd: launched.cwd, env: launched.env, stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (c) => (stderr = (stderr + c).slice(-4000)));
    child.stdin.on("error", () => {});
    const exited = new Promise<number | null>((resolve) => {
      child.on("exit", (code) => resolve(code));
      child.on("error", (err) => ((stderr += err.message), resolve(null)));
    });

    let threadId = "";
    let turnId = "";
    let text = "";
    let usage: Usage | null = null;
    /** What was told in `usage` events so far, and how many. */
    let told = jobUsage(null);
    let calls = 0;
    let retrying: string | null = null;
    const asked = new Set<string>();
    /** The subscription windows Codex reported in this job (`account/rateLimits/updated`). */
    const windows = new WindowBook();
    // Codex starts MCP servers beside the first turn, not before it: a turn started
    // before the bridge is ready is offered none of the app's tools. The turn waits for it.
    let bridgeReady: () => void = () => {};
    const bridgeStarted = o.bridge ? new Promise<void>((resolve) => (bridgeReady = resolve)) : Promise.resolve();
    let settle: (e: JobEvent) => void = () => {};
    const outcome = new Promise<JobEvent>((resolve) => (settle = resolve));

    const rpc = new CodexRpc(child, {
      notification: (method, p) => {
        switch (method) {
          case "item/agentMessage/delta": {
            const delta = String(p.delta ?? "");
            text += delta;
            if (delta) ctx.emit({ type: "text_delta", text: delta });
            return;
          }
          case "item/completed":
            return this.itemDone((p.item ?? {}) as Params, ctx);
          case "thread/tokenUsage/updated": {
            usage = ((p.tokenUsage as { total?: Usage } | undefined)?.total ?? usage) as Usage | null;
            // Told as it comes (after each model call), so a run that fails or is cut off later still has it counted: what the total grew by.
            const now = jobUsage(usage);
            const grew = { inputTokens: now.inputTokens - told.inputTokens, outputTokens: now.outputTokens - told.outputTokens, cacheReadTokens: now.cacheReadTokens - told.cacheReadTokens, cacheWriteTokens: now.cacheWriteTokens - told.cacheWriteTokens };
            if (Object.values(grew).every((n) => n >= 0) && Object.values(grew).some((n) => n > 0)) {
              told = now;
              ctx.emit({ type: "usage", call: `codex-${++calls}`, usage: grew });
            }
            return;
          }
          case "error": {
            const error = (p.error ?? {}) as { message?: string };
            // A retried request: said as activity, so a run waiting on it does not look stalled.
            if (p.willRetry) ctx.emit({ type: "activity", summary: `the model API failed (${error.message ?? "error"}); Codex retries`, detail: { retrying: true, message: error.message } });
            else retrying = error.message ?? null;
            return;
          }
          case "account/rateLimits/updated": {
            // Sparse updates: what it says is merged into what it said before.
            const reported = codexWindows(p.rateLimits);
            if (reported.length && windows.merge(reported)) ctx.reportWindows?.(reported);
            return;
          }
          case "mcpServer/startupStatus/updated":
            if (o.bridge && p.name === o.bridge.name && p.status !== "starting") {
              if (p.status !== "ready") ctx.emit({ type: "activity", summary: `the app's tools could not be offered to Codex (${String(p.error ?? p.status)})`, detail: { status: p.status } });
              bridgeReady();
            }
            return;
          case "serverRequest/resolved": {
            const id = String(p.requestId);
            if (asked.delete(id)) ctx.withdrawPermission(id);
            return;
          }
          case "turn/completed": {
            const turn = (p.turn ?? {}) as { status?: string; error?: { message?: string; codexErrorInfo?: unknown } | null };
            if (turn.status === "completed") return settle({ type: "done", finishReason: "end_turn", output: text, usage: jobUsage(usage) });
            // A turn that did not complete still used what its calls used: the failure carries it.
            const spent = (code: string, message: string): JobEvent => ({ type: "failed", code, message, usage: jobUsage(usage) });
            if (turn.status === "interrupted") return settle(spent("cancelled", "The job was cancelled."));
            // A spent window (Codex's `usageLimitExceeded`, the API's `usage_limit_reached`): its own code, naming when it resets.
            if (turn.error?.codexErrorInfo === "usageLimitExceeded" || /usage_limit_reached/.test(turn.error?.message ?? "")) {
              return settle(spent("usage_limit_reached", spentMessage("Codex", windows.spent(), turn.error?.message)));
            }
            const api = apiError(turn.error?.message);
            if (api) return settle(spent(api.code, api.message));
            return settle(spent(errorCode(turn.error?.codexErrorInfo), turn.error?.message ?? retrying ?? "Codex's turn failed."));
          }
        }
      },
      request: (id, method, p) => {
        const requestId = String(id);
        const ask = (tool: "command_execution" | "file_change", input: Params, description?: string) => {
          asked.add(requestId);
          void ctx.askPermission({ requestId, tool, input, ...(description ? { description } : {}) }).then(({ allow }) => {
            if (!asked.delete(requestId)) return; // withdrawn meanwhile: Codex no longer waits for it
            rpc.respond(id, { decision: allow ? "accept" : "decline" });
          });
        };
        switch (method) {
          case "item/commandExecution/requestApproval":
            return ask("command_execution", { command: p.command, cwd: p.cwd, reason: p.reason ?? null }, typeof p.reason === "string" ? p.reason : undefined);
          case "item/fileChange/requestApproval":
            return ask("file_change", { reason: p.reason ?? null, grantRoot: p.grantRoot ?? null }, typeof p.reason === "string" ? p.reason : undefined);
          default:
            // Questions to a person at Codex's own interface, logins, elicitations: nobody answers those here.
            return rpc.respondError(id, `svc-worker does not answer ${method}`);
        }
      },
    });

    // A job the worker kept through its own restart: the thread Codex saved.
    const resumed = ctx.session?.resume ? ctx.session.cliId : undefined;
    const pendingSteer: string[] = [];
    const onAbort = () => {
      if (threadId && turnId) void rpc.request("turn/interrupt", { threadId, turnId }).catch(() => {});
      setTimeout(() => child.kill("SIGTERM"), INTERRUPT_GRACE_MS).unref();
    };
    ctx.signal.addEventListener("abort", onAbort, { once: true });
    void exited.then((code) => settle(ctx.signal.aborted ? failed("cancelled", "The job was cancelled.") : failed("runtime_error", `codex app-server exited (${code})${stderr ? `: ${stderr.trim().slice(-500)}` : ""}`)));
    try {
      await rpc.request("initialize", { clientInfo: { name: "svc-worker", title: "svc-worker", version: "1" }, capabilities: null });
      rpc.notify("initialized");
      const settings = {
        cwd: this.workdir,
        approvalPolicy: "on-request",
        sandbox: o.sandboxMode,
        ...(job.model ?? this.options.localModel?.model ? { model: job.model ?? this.options.localModel?.model } : {}),
        ...(job.system ? { developerInstructions: job.system } : {}),
      };
      const thread = resumed
        ? // The thread Codex saved (a follow-up's conversation, or a job the worker kept through its own restart), picked up again.
          await rpc.request<{ thread: { id: string } }>("thread/resume", { threadId: resumed, ...settings, excludeTurns: true })
        : // Kept on disk only for a conversation, or a job the worker can resume after a restart.
          await rpc.request<{ thread: { id: string } }>("thread/start", { ...settings, ephemeral: !ctx.session });
      threadId = thread.thread.id;
      if (ctx.session && !resumed) ctx.sessionSaved?.(threadId);
      // The user's messages while it works steer the turn in flight (`turn/steer`), as typed into Codex.
      ctx.onUserMessage?.((text) => {
        if (!turnId) return void pendingSteer.push(text);
        void rpc.request("turn/steer", { threadId, expectedTurnId: turnId, input: [{ type: "text", text, text_elements: [] }] }).catch((err: Error) =>
          ctx.emit({ type: "activity", summary: `a message from the user reached Codex after its turn ended and was not taken (${err.message})`, detail: { steered: false } }),
        );
      });
      await Promise.race([bridgeStarted, new Promise((resolve) => setTimeout(resolve, BRIDGE_STARTUP_TIMEOUT_SEC * 1000).unref())]);
      // Cancelled meanwhile: onAbort stops the process, and its exit settles the job as cancelled.
      if (ctx.signal.aborted) throw new Error("cancelled");
      const turn = await rpc.request<{ turn: { id: string } }>("turn/start", { threadId, input: [{ type: "text", text: ctx.session?.restarted ? RESUME_PROMPT : job.prompt, text_elements: [] }] });
      turnId = turn.turn.id;
      // Messages that came before the turn began go to it now.
      for (const text of pendingSteer.splice(0)) void rpc.request("turn/steer", { threadId, expectedTurnId: turnId, input: [{ type: "text", text, text_elements: [] }] }).catch(() => {});
      if (ctx.signal.aborted) onAbort();
    } catch (err) {
      // A saved thread Codex cannot pick up again is a job the worker no longer holds.
      if (!ctx.signal.aborted) settle(failed(resumed ? "job_not_held" : "runtime_error", `codex app-server refused the job: ${(err as Error).message}`));
    }
    const end = await outcome;
    ctx.signal.removeEventListener("abort", onAbort);
    ctx.emit(end);
    child.kill("SIGTERM");
    await exited;
    await launched.cleanup?.();
    // The job ended: a thread saved only for the job will not be resumed.
    if (ctx.session && threadId && !ctx.session.keep) this.sessions.forget(threadId, ctx.allowedEnv);
  }

  /** A finished item: commands and file changes are said as activity, as the user's policy lets the app see them. */
  private itemDone(item: Params, ctx: JobContext): void {
    switch (item.type) {
      case "commandExecution": {
        const a = commandActivity(ctx.commandOutput, { command: String(item.command ?? ""), output: typeof item.aggregatedOutput === "string" ? item.aggregatedOutput : "", exitCode: typeof item.exitCode === "number" ? item.exitCode : null });
        return ctx.emit({ type: "activity", ...a });
      }
      case "fileChange": {
        const changes = (item.changes ?? []) as { path?: string; kind?: unknown }[];
        return ctx.emit({ type: "activity", summary: `changed ${changes.map((c) => `${typeof c.kind === "object" && c.kind ? Object.keys(c.kind)[0] ?? "" : String(c.kind ?? "")} ${c.path}`.trim()).join(", ")}`, detail: { status: item.status, paths: changes.map((c) => c.path) } });
      }
      case "mcpToolCall":
        return ctx.emit({ type: "activity", summary: `called ${item.server}/${item.tool} (${item.status})` });
    }
  }
}

const appServerChecked = new Map<string, boolean>();
/** Whether this Codex has `app-server` (asked once per command). */
function hasAppServer(command: string): boolean {
  let has = appServerChecked.get(command);
  if (has === undefined) {
    has = spawnSync(command, ["app-server", "--help"], { stdio: "ignore", timeout: 10_000 }).status === 0;
    appServerChecked.set(command, has);
  }
  return has;
}

/** The model API base URLs Codex's configuration names (its `base_url` entries), else Codex's own. */
function configuredApis(home: string): string[] {
  let toml = "";
  try {
    toml = fs.readFileSync(path.join(home, "config.toml"), "utf8");
  } catch {
    return CODEX_DEFAULT_APIS;
  }
  const urls = [...toml.matchAll(/^\s*base_url\s*=\s*"([^"]+)"/gm)].map((m) => m[1]);
  return urls.length ? urls : CODEX_DEFAULT_APIS;
}

/** A model API's error as Codex passes it on (the body of the API's answer, `{"error": {message, type, code}}`): its own code and message. */
function apiError(message: string | undefined): { code: string; message: string } | null {
  try {
    const body = JSON.parse(message ?? "") as { error?: { message?: string; type?: string; code?: string | null } };
    const code = body.error?.code || body.error?.type;
    return code ? { code: String(code).slice(0, 64), message: String(body.error?.message ?? message) } : null;
  } catch {
    return null;
  }
}

/** Codex's running total as a job's usage: its input counts cached and cache-write tokens in, a job's says them apart. */
function jobUsage(u: Usage | null): Required<Extract<JobEvent, { type: "done" }>["usage"]> {
  const t = u ?? { inputTokens: 0, cachedInputTokens: 0, cacheWriteInputTokens: 0, outputTokens: 0 };
  const n = (x: unknown) => (typeof x === "number" && Number.isFinite(x) && x > 0 ? Math.floor(x) : 0);
  return {
    inputTokens: Math.max(0, n(t.inputTokens) - n(t.cachedInputTokens) - n(t.cacheWriteInputTokens)),
    outputTokens: n(t.outputTokens),
    cacheReadTokens: n(t.cachedInputTokens),
    cacheWriteTokens: n(t.cacheWriteInputTokens),
  };
}

const STATUS_OF: Record<string, number> = { badRequest: 400, unauthorized: 401, usageLimitExceeded: 429, rateLimitExceeded: 429, internalServerError: 500, serverOverloaded: 503 };

/** The failed job's code: `api_error_<status>` when the model API's status is known, else Codex's own error kind. */
function errorCode(info: unknown): string {
  if (typeof info === "string") return STATUS_OF[info] ? `api_error_${STATUS_OF[info]}` : info.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  if (info && typeof info === "object") {
    const [kind, detail] = Object.entries(info)[0] ?? [];
    const status = (detail as { httpStatusCode?: number | null } | undefined)?.httpStatusCode;
    if (typeof status === "number") return `api_error_${status}`;
    if (kind) return kind.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
  }
  return "runtime_error";
}
