import { z } from "zod";

export const Environment = z.enum(["test", "live"]).describe("Every app has a `test` and a `live` environment; nothing crosses them.");
export type Environment = z.infer<typeof Environment>;
export const CostClass = z
  .enum(["user_hardware", "user_subscription", "app_served", "free"])
  .describe("Who paid for the compute: the user's hardware, the user's own subscription, the app (served in app), or nobody (service-answered).");
export type CostClass = z.infer<typeof CostClass>;
export const RouteKind = z.enum(["user-hardware", "user-subscription", "app"]);
export type RouteKind = z.infer<typeof RouteKind>;
/** Where a run went: a route kind, or `service` (the service answered it itself: `svc/echo`, never routed to anyone's machine). */
export const RunRoute = z.enum(["user-hardware", "user-subscription", "app", "service"]);
export type RunRoute = z.infer<typeof RunRoute>;
export const RuntimeKind = z.enum(["model", "agent"]).describe("`model`: a model server the service drives turn by turn; `agent`: a coding-agent CLI that runs its own loop.");
export type RuntimeKind = z.infer<typeof RuntimeKind>;
/** For an agent CLI, what pays for its model: the user's `subscription`, a provider `api_key` the user let it use, or the user's own `local_model`. */
export const RuntimeBilling = z.enum(["subscription", "api_key", "local_model"]);
export type RuntimeBilling = z.infer<typeof RuntimeBilling>;
/**
 * Why a runtime found on a machine cannot run there (its worker tried it, as a job would start it):
 * `sandbox_missing`: agent CLIs run only inside the operating-system sandbox and the machine has none (bubblewrap is not installed);
 * `sandbox_refused`: the sandbox is installed but the host forbids the namespaces it needs (a container, Ubuntu's AppArmor restriction);
 * `cli_not_launchable`: the CLI is installed and turned on but does not start (a version manager's shim the worker cannot resolve, a broken install).
 */
export const RuntimeUnavailableReason = z.enum(["sandbox_missing", "sandbox_refused", "cli_not_launchable"]);
export type RuntimeUnavailableReason = z.infer<typeof RuntimeUnavailableReason>;
export const RuntimeUnavailable = z.object({
  reason: RuntimeUnavailableReason,
  message: z.string().max(512).describe("What is wrong and what the machine's user can do, in words for them; never a path, user name or environment value of the machine."),
});
export type RuntimeUnavailable = z.infer<typeof RuntimeUnavailable>;
export const LiveState = z.enum(["online", "offline", "busy"]);

/** Integer micros (millionths of the currency unit): never a float, never a string. */
export const Micros = z
  .number()
  .int()
  .max(Number.MAX_SAFE_INTEGER)
  .min(-Number.MAX_SAFE_INTEGER)
  .describe("Amount in integer micros (1 USD = 1,000,000); within ±(2^53 − 1), so JSON carries it exactly.");
export const IsoTime = z.string().datetime({ offset: true }).describe("ISO 8601 timestamp.");

/**
 * Where a user stands against their plan in its current window: the user view's `allowance`, and the
 * same numbers in every 402, so an app can say "8 of 10 runs, resets on 1 December" without a second call.
 */
/** A user's standing (the schema below), named: the error envelope carries it, and a named type keeps every route's type small enough to emit. */
export interface Standing {
  unit: "runs" | "tokens";
  limit: number | null;
  used: number;
  remaining: number | null;
  reached: boolean;
  period: string;
  windowStart: string;
  resetsAt: string;
  spend: { usedMicros: number; ceilingMicros: number | null; remainingMicros: number | null; reached: boolean };
}
export const Standing: z.ZodType<Standing> = z.object({
  unit: z.enum(["runs", "tokens"]),
  limit: z.number().int().nullable().describe("The plan's allowance in `unit`; null: unlimited."),
  used: z.number().int().describe("Runs counted, or tokens used, this window: the sum of the ledger's rows."),
  remaining: z.number().int().nullable(),
  reached: z.boolean(),
  period: z.string().describe("The window's name: `2026-11` for a monthly plan, `2026` for a yearly one (UTC)."),
  windowStart: IsoTime.describe("When the window began (UTC)."),
  resetsAt: IsoTime.describe("When the next window begins and the allowance is whole again."),
  spend: z
    .object({
      usedMicros: Micros.describe("What the ledger recorded for the user this window."),
      ceilingMicros: Micros.nullable().describe("The plan's spend ceiling; null: none."),
      remainingMicros: Micros.nullable(),
      reached: z.boolean(),
    })
    .describe("Spend against the plan's ceiling, in integer micros of the plan's currency."),
});


/** The app's own id for its end user, as sent in `user`. */
export const UserId = z.string().min(1).max(256).describe("The app's id for its end user.");

/**
 * One usage window of an agent CLI's subscription, as the CLI itself reports it
 * (Claude Code's `rate_limit_event`, Codex's `account/rateLimits/updated`): `5h`,
 * `7d`, `7d_opus`, `7d_sonnet`, `overage`, or `<minutes>m` for a length Codex
 * names that has no short name. `rejected`: spent until `resetsAt`.
 */
export const UsageWindow = z.object({
  window: z.string().min(1).max(32).describe("`5h`, `7d`, `7d_opus`, `7d_sonnet`, `overage`, or `<minutes>m`."),
  status: z.enum(["allowed", "warning", "rejected"]).describe("`allowed`; `warning`: past the CLI's warning threshold; `rejected`: spent, the CLI refuses model calls until `resetsAt`."),
  usedPercent: z.number().min(0).max(100).optional().describe("How much of the window is used, as the CLI says it (Claude Code says it only past a warning threshold)."),
  resetsAt: IsoTime.optional().describe("When the window resets."),
});
export type UsageWindow = z.infer<typeof UsageWindow>;

/** An agent CLI's subscription windows as its machine last reported them. */
export const RuntimeLimits = z.object({
  windows: z.array(UsageWindow).max(8),
  updatedAt: IsoTime.describe("When the machine reported them."),
});
export type RuntimeLimits = z.infer<typeof RuntimeLimits>;

export const Runtime = z.object({
  name: z.string().describe("e.g. `ollama`, `llamacpp`, `lmstudio`, `openai-compatible:<name>`, `claude-code`, `codex`, and `claude-code-local`, `codex-local` (the CLIs on the user's own model)."),
  kind: RuntimeKind,
  costClass: CostClass.describe("The class the ledger records work on this runtime with: the service's decision from `kind` and `billing` (`model`, or `agent` on a `local_model`: `user_hardware`; other `agent`s: `user_subscription`), whatever the machine advertised."),
  models: z.array(z.string()),
  version: z.string().nullable().describe("The runtime's own version as the machine reports it (an agent CLI's `--version`); null when it said none."),
  billing: RuntimeBilling.nullable()
    .describe("For an agent CLI, what pays for its model: the user's `subscription`, a provider `api_key` the user let it use, or a `local_model`; null for a model runtime."),
  supported: z.boolean().describe("False: found on the machine in a version its worker does not support; never routed to."),
  note: z.string().nullable().describe("Why it is not supported, or anything else the machine said of it."),
  unavailable: RuntimeUnavailable.nullable().describe(
    "Found and turned on, but it cannot run on this machine, and why (`sandbox_missing`, `sandbox_refused`, `cli_not_launchable`): never routed to; the machine's user can fix it there (the message says how). Null: it runs.",
  ),
  state: LiveState,
  limits: RuntimeLimits.optional().describe(
    "An agent CLI on a subscription: its usage windows as the CLI last reported them (absent until it has; Claude Code reports them only on a subscription login). A runtime with a `rejected` window is not routed to until its `resetsAt`.",
  ),
});

export const Machine = z.object({
  id: z.string(),
  hostname: z.string(),
  platform: z.string(),
  arch: z.string(),
  client: z.string(),
  state: LiveState,
  pairedAt: IsoTime,
  lastSeenAt: IsoTime.nullable(),
  runtimes: z.array(Runtime),
});

export const Page = <T extends z.ZodTypeAny>(item: T) =>
  z.object({
    data: z.array(item),
    hasMore: z.boolean(),
    nextCursor: z.string().nullable().describe("Pass as `cursor` to read the next page."),
  });
