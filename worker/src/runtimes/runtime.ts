import type { AgentRunJob, Job, JobEvent, RuntimeAdvert, UsageWindow } from "@svc/contract";

/** How a running job asks before an agent acts: the machine's policy first, then (where it lets the app decide) the app. */
export type AskPermission = (request: { requestId: string; tool: string; input: unknown; description?: string }) => Promise<{ allow: boolean; message?: string }>;

/** The app's answer to a call of one of its tools. */
export interface ToolAnswer {
  output: string;
  isError: boolean;
}

/** Calls one of the app's tools (offered to an agent CLI through the MCP bridge): the service asks the app and relays its result. */
export type CallTool = (call: { id: string; name: string; arguments: string }) => Promise<ToolAnswer>;

/**
 * An agent CLI process as its runtime wants it started. The launcher (the
 * machine's policy, `worker/src/policy/`) decides how it really starts: inside
 * the operating-system sandbox, with only the allowed environment.
 */
export interface AgentProcess {
  command: string;
  args: string[];
  /** The working folder: the only folder of the user's the CLI may write. */
  cwd: string;
  /** What the runtime itself needs set (its model API, its state folder); added to the allowed environment, never filtered by it. */
  env: Record<string, string>;
  /** Besides the working folder, paths the CLI must write (its own state, the MCP bridge's socket folder). */
  writable?: string[];
  /** Paths it must read (its installation, the bridge's code). */
  readable?: string[];
  /** Model API base URLs the CLI must reach even when the policy keeps the network off. */
  modelApis?: string[];
}

/** A process ready to spawn: what the launcher made of an `AgentProcess`. */
export interface Launched {
  command: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** The operating-system sandbox the process starts in (`launch` sets it); unset: unconfined. */
  sandbox?: SandboxKind;
  /** Undoes what launching set up (temporary folders, forwarders), once the process is gone. */
  cleanup?: () => void | Promise<void>;
}

export type Launch = (p: AgentProcess) => Promise<Launched>;

/** The operating-system sandboxes the launcher puts agent CLIs in: bubblewrap on Linux, Seatbelt on macOS. */
export type SandboxKind = "bubblewrap" | "seatbelt";

export interface JobContext {
  emit(event: JobEvent): void;
  signal: AbortSignal;
  askPermission: AskPermission;
  /** The agent CLI withdrew a permission request it had made (answer no longer needed). */
  withdrawPermission(requestId: string): void;
  callTool: CallTool;
  launch: Launch;
  /** How much of what commands print the app may see (the user's policy): shape command activity with `commandActivity` (policy/output.ts). */
  commandOutput: "none" | "summary" | "full";
  /** The environment the policy lets reach the CLI (before the runtime's own additions): where a runtime reads its model API's address. */
  allowedEnv: NodeJS.ProcessEnv;
  /**
   * The operating-system sandbox `launch` starts agent CLIs in on this machine
   * (the user's policy and what the machine offers): `null` when they run
   * unconfined (no sandbox here, and the user accepted that). Unset counts as
   * unconfined. A CLI with a sandbox of its own that cannot run inside this one
   * (Codex) is told to use none when, and only when, this one is there.
   */
  sandbox?: SandboxKind | null;
  /**
   * The CLI reported its subscription's usage windows (one or more, as it said them):
   * the connection merges them per runtime and tells the service (`runtime_limits`),
   * if the service takes them. Unset: not told anywhere.
   */
  reportWindows?(windows: UsageWindow[]): void;
  /**
   * The CLI's session kept on disk, so that a restarted worker can resume it: `id` is the
   * worker's name for it (Claude Code takes it as its own session id), `cliId` the CLI's own
   * id when it names the session itself (Codex's thread), once `sessionSaved` said it;
   * `resume`: pick the saved conversation up (with `RESUME_PROMPT`). Unset: no session is kept.
   */
  session?: {
    id: string;
    resume: boolean;
    cliId?: string;
    /** Resumed because the worker restarted mid-job (told `RESUME_PROMPT`); unset: a follow-up run continuing it (told its prompt). */
    restarted?: boolean;
    /** Kept after the job (a conversation's session, under the user's `sessions.keepDays`): not deleted when the job ends. */
    keep?: boolean;
  };
  /** The CLI named the session it keeps (Codex's thread id): kept with the job, for a resume. */
  sessionSaved?(cliId: string): void;
  /**
   * Takes the user's messages sent while the job runs (steering, `user_message`): the runtime passes each to
   * the CLI mid-turn, as typed into it. Messages that came before the runtime listened are handed over at once.
   */
  onUserMessage?(listener: (text: string) => void): void;
}

/** What a resumed session is told first: why it stopped, and to go on. */
export const RESUME_PROMPT =
  "(The machine running you restarted while you worked, so anything you were waiting for, a permission or a tool's result, was lost; nothing from your side was lost.) Continue the task from where you stopped.";

/** How an agent runtime is set up besides its command and working folder. */
export interface AgentRuntimeOptions {
  /**
   * A local model server the CLI is pointed at instead of its provider (Claude Code
   * at an Anthropic-compatible server such as Ollama's, Codex at an OpenAI-compatible
   * one): its runs cost the user's hardware (`billing: local_model`).
   */
  localModel?: { baseUrl: string; model?: string; apiKey?: string };
}

/** A runtime this machine serves: what it advertises, and how it runs one job. */
export interface Runtime {
  advert: RuntimeAdvert;
  /** An agent CLI's working folder (a kept session belongs to it: a follow-up elsewhere cannot resume it). */
  readonly workdir?: string;
  /** Runs one job to its end; the last event emitted is `done` or `failed`. */
  run(job: Job, ctx: JobContext): Promise<void>;
  /**
   * An agent CLI that can keep its session on disk and resume it (`ctx.session`): a job of it
   * outlives a worker restart. `forgetSession` deletes a session that will not be resumed.
   */
  sessions?: { forget(id: string, allowedEnv: NodeJS.ProcessEnv): void };
}

export const failed = (code: string, message: string): JobEvent => ({ type: "failed", code, message });

/**
 * An agent CLI (Claude Code, Codex): its command, started in the user's working folder
 * through the machine's policy, runs whole agent runs (a model turn is refused), and keeps
 * its sessions on disk for a conversation's next run.
 */
export abstract class AgentCliRuntime implements Runtime {
  constructor(
    readonly advert: RuntimeAdvert,
    protected readonly command: string,
    readonly workdir: string,
    protected readonly options: AgentRuntimeOptions = {},
  ) {}

  /** Its name where it refuses a job (`claude-code`, `codex`). */
  protected abstract readonly cli: string;
  abstract readonly sessions: NonNullable<Runtime["sessions"]>;

  async run(job: Job, ctx: JobContext): Promise<void> {
    if (job.kind !== "agent_run") return ctx.emit(failed("unsupported_job", `${this.cli} runs whole agent runs, not ${job.kind}.`));
    return this.runAgent(job, ctx);
  }

  /** Runs one agent run to its end; the last event emitted is `done` or `failed`. */
  protected abstract runAgent(job: AgentRunJob, ctx: JobContext): Promise<void>;
}
