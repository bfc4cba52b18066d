import { z } from "zod";

/**
 * Who decides one kind of request an agent CLI makes on this machine:
 * - `allow`: allowed without asking anyone (the user allowed it here, once and for all);
 * - `app`: the app decides (its user answers in the app);
 * - `machine`: the user must confirm it on this machine (at the worker's terminal); no terminal, no consent: refused;
 * - `refuse`: always refused, whatever the app says.
 */
export const Decider = z.enum(["allow", "app", "machine", "refuse"]);
export type Decider = z.infer<typeof Decider>;

const EnvName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "an environment variable's name (letters, digits and _)");

/** The kinds of request a CLI's permission request is sorted into. */
export const REQUEST_KINDS = ["read", "write", "command", "network", "other"] as const;
export type RequestKind = (typeof REQUEST_KINDS)[number];

/**
 * The end user's policy for agent CLIs on this machine (`policy` in config.json,
 * shown and changed with `svc-worker policy`). It is the user's, not the app's:
 * whatever the app answers, this wins. Safe defaults throughout.
 */
export const Policy = z
  .object({
    /** Agent CLIs served at all: each is off until the user turns it on. */
    agents: z
      .object({
        "claude-code": z.boolean().default(false),
        codex: z.boolean().default(false),
      })
      .strict()
      .default({}),
    /**
     * The agent CLIs' own paths, for an install the worker cannot resolve from PATH (a version
     * manager's shim it cannot ask, a CLI kept off PATH). Absent: found on PATH as the shell would.
     */
    commands: z
      .object({
        "claude-code": z.string().refine((p) => p.startsWith("/") || /^[A-Za-z]:[\\/]/.test(p), "an absolute path").optional(),
        codex: z.string().refine((p) => p.startsWith("/") || /^[A-Za-z]:[\\/]/.test(p), "an absolute path").optional(),
      })
      .strict()
      .default({}),
    sandbox: z
      .object({
        /**
         * `true` (default): agent CLIs run only inside the operating-system sandbox
         * (bubblewrap on Linux, Seatbelt on macOS); where there is none they are not served.
         * `false`: the user accepts running them unconfined where no sandbox exists.
         */
        required: z.boolean().default(true),
        /** Network for the CLI and what it runs, beyond its own model API: off unless the user allows it. */
        network: z.boolean().default(false),
        /** More folders the CLI may read (absolute paths). */
        readable: z.array(z.string()).default([]),
        /** More folders the CLI may write, besides the working folder (absolute paths). */
        writable: z.array(z.string()).default([]),
      })
      .strict()
      .default({}),
    /** Environment variables passed to the CLI besides the base set (PATH, LANG, TERM, TZ...): nothing else reaches it. */
    env: z.array(EnvName).default([]),
    /**
     * Provider API keys the CLI may use (e.g. `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`):
     * passed to it, and its runs are then reported as billed to that key, not to the subscription.
     */
    providerKeys: z.array(EnvName).default([]),
    /** Who decides each kind of request. */
    decide: z
      .object({
        read: Decider.default("app"),
        write: Decider.default("app"),
        command: Decider.default("app"),
        network: Decider.default("machine"),
        other: Decider.default("app"),
      })
      .strict()
      .default({}),
    /** How much the app sees of what the CLI's commands print: a summary (default), nothing, or all of it. */
    commandOutput: z.enum(["none", "summary", "full"]).default("summary"),
    /**
     * Conversations: an agent CLI's session (its own files on this machine, under `~/.claude/projects`
     * or `CODEX_HOME/sessions`, never sent to the service) is kept after its run, so a follow-up run
     * can resume it. `keepDays`: how many days one stays after its last use (default 7), then it is
     * deleted; 0: deleted at each run's end, as before conversations.
     */
    sessions: z
      .object({
        keepDays: z.number().int().min(0).max(365).default(7),
      })
      .strict()
      .default({}),
    /** What this machine tells the service about the jobs it runs, beyond their results. */
    telemetry: z
      .object({
        /**
         * `true`: the timing spans of each job (the local model call or the CLI's run, the app's tool calls
         * and the permission requests it made here: names, times, counts, never prompts, outputs or
         * arguments) go to the service, joined to the app's trace. Off (default): none.
         */
        traces: z.boolean().default(false),
      })
      .strict()
      .default({}),
  })
  .strict();
export type Policy = z.infer<typeof Policy>;

/** The policy with every default filled in. */
export const defaultPolicy = (): Policy => Policy.parse({});
