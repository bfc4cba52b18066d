import fs from "node:fs";
import path from "node:path";
import type { Settings } from "../store.js";
import type { AgentRuntimeOptions, Runtime } from "./runtime.js";
import { OpenAICompatibleRuntime } from "./openai-compatible.js";
import { ClaudeCodeRuntime } from "./claude-code.js";
import { CodexRuntime } from "./codex.js";
import { supportOf, versionOf } from "./versions.js";
import { detectSandbox } from "../policy/sandbox.js";
import { Policy } from "../policy/schema.js";
import { redact } from "../redact.js";
import { commandFix, locateCli } from "./locate.js";
import { preflightCli } from "./preflight.js";
import type { RuntimeAdvert, RuntimeKind, RuntimeUnavailableReason } from "@svc/contract";

/** The provider keys each agent CLI would use: listed in the policy's providerKeys and set, its runs are billed to that key. */
const PROVIDER_KEYS = { "claude-code": ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"], codex: ["OPENAI_API_KEY", "CODEX_API_KEY"] } as const;

/** Where the local model servers listen by default. */
export const DEFAULT_ENDPOINTS = {
  ollama: "http://127.0.0.1:11434",
  llamacpp: "http://127.0.0.1:8080",
  lmstudio: "http://127.0.0.1:1234",
} as const;

/** A model server's answer to its model list: quick when it is there; a busy machine gets one more, longer try. */
const PROBE_TIMEOUTS_MS = [1500, 5000];

/** Jobs a runtime takes at once unless `maxConcurrentJobs` in config.json says otherwise. */
export const DEFAULT_MAX_CONCURRENT_JOBS = { model: 4, agent: 1 } as const;

/** The cap of one runtime: config.json's number, or its entry by name, or the default of its kind. */
export function jobCapOf(name: string, kind: RuntimeKind, setting: Settings["maxConcurrentJobs"]): number {
  if (typeof setting === "number") return setting;
  return setting?.[name] ?? DEFAULT_MAX_CONCURRENT_JOBS[kind];
}

export interface Discovery {
  runtimes: Runtime[];
  /**
   * Agent CLIs found in a version this worker does not support, or turned on and unable to run here (no sandbox,
   * the host refuses it, the CLI does not start: `unavailable`): advertised (`supported: false`), never served.
   */
  unsupported: RuntimeAdvert[];
  /** One line per runtime looked for and not served, saying why. */
  notes: string[];
}

/** Finds what this machine can serve: model servers that answer, agent CLIs on PATH (with a working folder). */
export async function discoverRuntimes(settings: Settings, env: NodeJS.ProcessEnv = process.env): Promise<Discovery> {
  const conf = settings.runtimes ?? {};
  const notes: string[] = [];
  const runtimes: Runtime[] = [];
  const unsupported: RuntimeAdvert[] = [];

  const probes: Promise<Runtime | null>[] = [];
  const strip = (url: string) => url.replace(/\/+$/, "").replace(/\/v1$/, "");
  for (const name of ["ollama", "llamacpp", "lmstudio"] as const) {
    const url = conf[name] === false ? null : strip(conf[name] ?? DEFAULT_ENDPOINTS[name]);
    if (url === null) {
      notes.push(`${name}: turned off in config`);
      continue;
    }
    probes.push(
      listModels(name, url).then(
        (models) => new OpenAICompatibleRuntime({ name, kind: "model", costClass: "user_hardware", models }, url),
        (err) => (notes.push(`${name}: nothing at ${url} (${(err as Error).message})`), null),
      ),
    );
  }
  for (const o of conf.openai ?? []) {
    const url = strip(o.url);
    const name = `openai-compatible:${o.name}`;
    probes.push(
      listModels("openai", url, o.apiKey).then(
        (models) => new OpenAICompatibleRuntime({ name, kind: "model", costClass: "user_hardware", models }, url, o.apiKey),
        (err) => (notes.push(`${name}: nothing at ${url} (${(err as Error).message})`), null),
      ),
    );
  }
  for (const r of await Promise.all(probes)) if (r) runtimes.push(r);

  const workdir = settings.workdir ? path.resolve(settings.workdir) : null;
  const workdirOk = workdir !== null && fs.existsSync(workdir) && fs.statSync(workdir).isDirectory();
  // Filled in with the defaults (settings read from disk already are; a caller's may not be).
  const policy = Policy.parse(settings.policy ?? {});
  for (const [name, conf_, Kind] of [
    ["claude-code", conf.claude, ClaudeCodeRuntime],
    ["codex", conf.codex, CodexRuntime],
  ] as const) {
    if (conf_ === false) {
      notes.push(`${name}: turned off in config`);
      continue;
    }
    if (!policy.agents[name]) {
      notes.push(`${name}: not turned on (agent CLIs are served only when you allow them: svc-worker policy set agents.${name} true)`);
      continue;
    }
    const located = locateCli(name, { explicit: policy.commands[name], configured: conf_, env, cwd: workdirOk ? workdir! : undefined });
    if (!located.ok && located.code === "cli_not_found") {
      notes.push(`${name}: ${located.message} (or name it: ${commandFix(name)})`);
      continue;
    }
    if (!workdirOk) {
      notes.push(`${name}: found${located.ok ? ` at ${located.command}` : ""}, but no working folder is set (svc-worker start --workdir <folder>): agents run only there`);
      continue;
    }
    const keys = policy.providerKeys;
    const billing = PROVIDER_KEYS[name].some((k) => keys.includes(k) && env[k]) ? ("api_key" as const) : ("subscription" as const);
    const local = conf.localAgents?.[name];
    const advertsOf = (version: string | null): { advert: RuntimeAdvert; options: AgentRuntimeOptions }[] => [
      { advert: { name, kind: "agent", costClass: "user_subscription", models: [], ...(version ? { version } : {}), billing }, options: {} },
      // The same CLI on the user's own model: its own runtime, paid by nobody's subscription.
      ...(local
        ? [{ advert: { name: `${name}-local`, kind: "agent" as const, costClass: "user_hardware" as const, models: [local.model], ...(version ? { version } : {}), billing: "local_model" as const }, options: { localModel: { baseUrl: local.url, model: local.model, ...(local.apiKey ? { apiKey: local.apiKey } : {}) } } }]
        : []),
    ];
    // Turned on but unable to run here: advertised as such (the app can tell its user why), never served.
    const cannotRun = (reason: RuntimeUnavailableReason, forUser: string, forApp: string, version: string | null) => {
      notes.push(`${name}: ${forUser}`);
      const message = redact(forApp).slice(0, 512);
      for (const { advert } of advertsOf(version)) unsupported.push({ ...advert, supported: false, note: message, unavailable: { reason, message } });
    };
    if (!located.ok) {
      cannotRun("cli_not_launchable", located.message, `${name} is turned on, but the worker cannot tell which ${name} to start: ${located.message}`, null);
      continue;
    }
    const command = located.command;
    const via = located.via ? ` (through ${located.via}: ${located.found})` : "";
    const sandbox = detectSandbox();
    if (sandbox.kind === null && policy.sandbox.required) {
      const cause = sandbox.code === "sandbox_refused" ? "the sandbox is installed but this host refuses it" : "this machine has no sandbox";
      cannotRun(
        sandbox.code ?? "sandbox_missing",
        `found at ${command}${via}, but agent CLIs run only inside a sandbox and ${cause} (${sandbox.why}). To fix: ${sandbox.fix}`,
        `${name} is installed and turned on, but agent CLIs run only inside a sandbox and ${cause}: ${sandbox.why}. On the machine: ${sandbox.fix}.`,
        versionOf(command),
      );
      continue;
    }
    const checked = await preflightCli(command, { workdir: workdir!, policy, env, sandbox });
    if (!checked.ok) {
      cannotRun(
        "cli_not_launchable",
        `found at ${command}${via}, but ${checked.message}. Name the CLI to start, if another: ${commandFix(name)}`,
        `${name} is installed and turned on, but ${checked.message}.`,
        versionOf(command),
      );
      continue;
    }
    const support = supportOf(name, checked.version);
    for (const { advert, options } of advertsOf(checked.version)) {
      if (!support.supported) {
        notes.push(`${advert.name}: ${support.note}`);
        unsupported.push({ ...advert, supported: false, note: support.note });
        continue;
      }
      runtimes.push(new Kind(advert, command, workdir!, options));
    }
  }
  for (const r of runtimes) r.advert.maxConcurrentJobs = jobCapOf(r.advert.name, r.advert.kind, settings.maxConcurrentJobs);
  return { runtimes, unsupported, notes };
}

/**
 * The models a server lists. Nothing listening is known at once (refused); a server that does not answer in
 * time is asked once more with a longer wait, since a machine busy at the worker's start (a laptop waking,
 * a build running) would otherwise leave its model server unadvertised for the worker's whole life.
 */
async function listModels(kind: string, baseUrl: string, apiKey?: string): Promise<string[]> {
  for (const [i, ms] of PROBE_TIMEOUTS_MS.entries()) {
    try {
      return await listModelsOnce(kind, baseUrl, AbortSignal.timeout(ms), apiKey);
    } catch (err) {
      const timedOut = (err as Error).name === "TimeoutError";
      if (!timedOut || i === PROBE_TIMEOUTS_MS.length - 1) throw err;
    }
  }
  throw new Error("unreachable");
}

async function listModelsOnce(kind: string, baseUrl: string, signal: AbortSignal, apiKey?: string): Promise<string[]> {
  const headers = apiKey ? { authorization: `Bearer ${apiKey}` } : undefined;
  if (kind === "ollama") {
    const res = await fetch(`${baseUrl}/api/tags`, { signal });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const body = (await res.json()) as { models?: { name?: string; model?: string }[] };
    return (body.models ?? []).map((m) => m.name ?? m.model ?? "").filter(Boolean);
  }
  const res = await fetch(`${baseUrl}/v1/models`, { signal, headers });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  const body = (await res.json()) as { data?: { id?: string }[] };
  return (body.data ?? []).map((m) => m.id ?? "").filter(Boolean);
}
