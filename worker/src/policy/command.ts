import type { Command } from "commander";
import { detectSandbox } from "./sandbox.js";
import { defaultPolicy, Policy } from "./schema.js";
import type { Store } from "../store.js";

/** Every setting of the policy, with what it means (in the order `policy` shows them). */
const SETTINGS: Record<string, string> = {
  "agents.claude-code": "serve Claude Code runs at all (on your subscription or the provider key you allow)",
  "agents.codex": "serve Codex runs at all",
  "commands.claude-code": "Claude Code's own path, where the worker cannot find it on PATH or through its version manager (unset: found on PATH)",
  "commands.codex": "Codex's own path, likewise (unset: found on PATH)",
  "sandbox.required": "run agent CLIs only inside the operating-system sandbox; false: unconfined where there is none",
  "sandbox.network": "let the CLI and what it runs reach the network beyond its own model API",
  "sandbox.readable": "more folders the CLI may read (absolute paths)",
  "sandbox.writable": "more folders the CLI may write, besides the working folder (absolute paths)",
  env: "environment variables passed to the CLI besides PATH, HOME, LANG and the like",
  providerKeys: "provider API keys the CLI may use (then its runs are billed to that key)",
  "decide.read": "who decides when the CLI asks to read: allow, app, machine (you, at this terminal) or refuse",
  "decide.write": "who decides when it asks to write a file",
  "decide.command": "who decides when it asks to run a command",
  "decide.network": "who decides when it asks to fetch from the network",
  "decide.other": "who decides anything else it asks",
  commandOutput: "what the app sees of command output: none, summary (the command and the output's size) or full",
  "telemetry.traces": "send the service the timing spans of jobs run here (names, times, token counts; never prompts, outputs or arguments), joined to the app's trace",
  "sessions.keepDays": "days an agent CLI's session (its own files here, never sent) is kept after its last use, so a follow-up run can resume it; 0: deleted at each run's end (`svc-worker sessions` lists them)",
};

type Json = Record<string, unknown>;
const get = (o: Json, key: string): unknown => key.split(".").reduce<unknown>((v, k) => (v && typeof v === "object" ? (v as Json)[k] : undefined), o);
function put(o: Json, key: string, value: unknown): void {
  const ks = key.split(".");
  let at = o;
  for (const k of ks.slice(0, -1)) at = (at[k] ??= {}) as Json;
  if (value === undefined) delete at[ks.at(-1)!];
  else at[ks.at(-1)!] = value;
}
const show = (v: unknown) => (Array.isArray(v) ? (v.length ? v.join(", ") : "(none)") : v === undefined ? "(unset)" : String(v));

/**
 * `svc-worker policy`: the user's rules for agent CLIs on this machine, shown in
 * plain words and changed one setting at a time, validated before anything is
 * written (a bad key or value changes nothing, exit 2). A running worker sees
 * the change within seconds (`served-watch.ts`) and applies it to the jobs it starts next.
 */
export function registerPolicyCommand(program: Command, storeOf: () => Store, out: (line: string) => void): void {
  const policy = program.command("policy").description("Show your rules for agent CLIs on this machine (what an app may do here), or change them.");

  policy.action(() => {
    const store = storeOf();
    const raw = (store.readSettings().policy ?? {}) as Json;
    const effective = Policy.parse(raw) as unknown as Json;
    const defaults = defaultPolicy() as unknown as Json;
    const sandbox = detectSandbox();
    out(`Policy for agent CLIs on this machine, and what it sends besides results (${store.settingsPath}); whatever an app asks, these win.`);
    out(`Sandbox here: ${sandbox.kind ?? `none (${sandbox.why})`}.`);
    for (const [key, meaning] of Object.entries(SETTINGS)) {
      const value = get(effective, key);
      const isDefault = JSON.stringify(value) === JSON.stringify(get(defaults, key));
      out(`  ${key} = ${show(value)}${isDefault ? " (default)" : ""}: ${meaning}`);
    }
    out("Change one with `svc-worker policy set <key> <value>` (lists: +NAME / -NAME); a running worker applies it within seconds.");
  });

  policy
    .command("set <key> <value>")
    .description("Change one setting, e.g. `agents.claude-code true`, `decide.command machine`, `env +AWS_PROFILE`.")
    // `env -AWS_PROFILE` removes from a list: a value, not an option.
    .allowUnknownOption()
    .action((key: string, value: string) => {
      if (!(key in SETTINGS)) program.error(`Unknown setting ${key}. Settings: ${Object.keys(SETTINGS).join(", ")}.`, { exitCode: 2 });
      const store = storeOf();
      const settings = store.readSettings();
      const raw = structuredClone((settings.policy ?? {}) as Json);
      const current = get(Policy.parse(raw) as unknown as Json, key);
      let next: unknown;
      if (Array.isArray(current)) {
        const list = new Set(current as string[]);
        if (value.startsWith("+")) list.add(value.slice(1));
        else if (value.startsWith("-")) list.delete(value.slice(1));
        else {
          list.clear();
          for (const v of value.split(",").filter(Boolean)) list.add(v.trim());
        }
        next = [...list];
      } else if (typeof current === "boolean") {
        if (value !== "true" && value !== "false") program.error(`${key} is true or false, not ${JSON.stringify(value)}.`, { exitCode: 2 });
        next = value === "true";
      } else if (typeof current === "number") {
        if (!/^\d+$/.test(value)) program.error(`${key} is a whole number, not ${JSON.stringify(value)}. Nothing was changed.`, { exitCode: 2 });
        next = Number(value);
      } else next = value;
      put(raw, key, next);
      const parsed = Policy.safeParse(raw);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        program.error(`${key} cannot be ${JSON.stringify(value)}: ${issue.message}. Nothing was changed.`, { exitCode: 2 });
      }
      store.writeSettings({ ...settings, policy: raw as Policy });
      out(`${key} = ${show(next)}. A running worker applies it within seconds (to the jobs it starts next).`);
    });

  policy
    .command("reset [key]")
    .description("Back to the default: one setting, or the whole policy.")
    .action((key?: string) => {
      if (key !== undefined && !(key in SETTINGS)) program.error(`Unknown setting ${key}. Settings: ${Object.keys(SETTINGS).join(", ")}.`, { exitCode: 2 });
      const store = storeOf();
      const settings = store.readSettings();
      const raw = structuredClone((settings.policy ?? {}) as Json);
      if (key) put(raw, key, undefined);
      store.writeSettings({ ...settings, policy: (key ? raw : {}) as Policy });
      out(key ? `${key} is back to its default (${show(get(defaultPolicy() as unknown as Json, key))}).` : "The policy is back to its defaults.");
    });
}

/** The policy in one line, as `start` and `status` print it. */
export function policySummary(input: unknown): string {
  const p = Policy.parse(input ?? {});
  const on = Object.entries(p.agents).filter(([, v]) => v).map(([k]) => k);
  const decide = Object.entries(p.decide).map(([k, v]) => `${k} ${v}`).join(", ");
  return [
    `agent CLIs ${on.length ? on.join(", ") : "off"}`,
    `sandbox ${p.sandbox.required ? "required" : "optional"}, network ${p.sandbox.network ? "on" : "off"}`,
    `decides: ${decide}`,
    `command output: ${p.commandOutput}`,
    `traces ${p.telemetry.traces ? "sent" : "off"}`,
    p.sessions.keepDays ? `sessions kept ${p.sessions.keepDays} day${p.sessions.keepDays === 1 ? "" : "s"}` : "sessions not kept",
  ].join("; ");
}

