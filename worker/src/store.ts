import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { z } from "zod";
import { Policy } from "./policy/schema.js";

/**
 * Where the worker keeps its settings and its pairing token: `--config-dir`, else
 * `SVC_WORKER_HOME`, else `$XDG_CONFIG_HOME/svc-worker` (`~/.config/svc-worker`).
 * The folder is 0700 and the credentials file 0600: only the user can read the token.
 */
export function configDir(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  if (flag) return path.resolve(flag);
  if (env.SVC_WORKER_HOME) return path.resolve(env.SVC_WORKER_HOME);
  const base = env.XDG_CONFIG_HOME || (process.platform === "win32" && env.APPDATA) || path.join(os.homedir(), ".config");
  return path.join(base, "svc-worker");
}

const Endpoint = z.union([z.string().url(), z.literal(false)]);
const JobCap = z.number().int().min(1).max(1024);

/**
 * `config.json`: defaults for flags and what to serve, written by hand or by
 * `pair`. Runtimes are found at their usual places unless set here (`false`
 * turns one off); agent CLIs run only in `workdir`, and only when it is set.
 */
/** A local model an agent CLI is pointed at: its server's base URL, the model to ask for, a key if the server wants one. */
const LocalModel = z.object({ url: z.string().url(), model: z.string().min(1).max(256), apiKey: z.string().optional() });

export const Settings = z.object({
  server: z.string().url().optional(),
  connectKey: z.string().optional(),
  workdir: z.string().optional(),
  /**
   * Jobs each runtime takes at once: one number for every runtime, or per runtime
   * name (`{"ollama": 2, "claude-code": 1}`). Default: 4 for a model server, 1 for
   * an agent CLI. Advertised to the service, which routes no more to it.
   */
  maxConcurrentJobs: z.union([JobCap, z.record(z.string(), JobCap)]).optional(),
  runtimes: z
    .object({
      ollama: Endpoint.optional(),
      llamacpp: Endpoint.optional(),
      lmstudio: Endpoint.optional(),
      openai: z.array(z.object({ name: z.string().regex(/^[a-z0-9-]+$/), url: z.string().url(), apiKey: z.string().optional() })).optional(),
      claude: z.union([z.string(), z.literal(false)]).optional(),
      codex: z.union([z.string(), z.literal(false)]).optional(),
      /**
       * Agent CLIs on the user's own model: Claude Code against a local
       * Anthropic-compatible server (Ollama serves one), Codex against a local
       * OpenAI Responses-compatible one. Each is served as its own runtime
       * (`claude-code-local`, `codex-local`), routed under `user-hardware` and
       * metered as `user_hardware`.
       */
      localAgents: z
        .object({
          "claude-code": LocalModel.optional(),
          codex: LocalModel.optional(),
        })
        .optional(),
    })
    .optional(),
  /** The user's policy for agent CLIs on this machine (worker/src/policy/schema.ts); absent: the safe defaults. */
  policy: Policy.optional(),
});
export type Settings = z.infer<typeof Settings>;

/** `credentials.json`: what pairing gave this machine. */
export const Credentials = z.object({
  server: z.string(),
  connectUrl: z.string(),
  machineId: z.string(),
  pairingToken: z.string(),
  environment: z.enum(["test", "live"]),
  appName: z.string(),
  pairedAt: z.string(),
});
export type Credentials = z.infer<typeof Credentials>;

export class Store {
  constructor(readonly dir: string) {}

  get settingsPath() {
    return path.join(this.dir, "config.json");
  }

  get credentialsPath() {
    return path.join(this.dir, "credentials.json");
  }

  readSettings(): Settings {
    return this.readJson(this.settingsPath, Settings) ?? {};
  }

  readCredentials(): Credentials | null {
    return this.readJson(this.credentialsPath, Credentials);
  }

  /** Forgets the pairing; says whether there was one. */
  removeCredentials(): boolean {
    try {
      fs.unlinkSync(this.credentialsPath);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw err;
    }
  }

  writeSettings(settings: Settings): void {
    this.writePrivate(this.settingsPath, settings);
  }

  writeCredentials(credentials: Credentials): void {
    this.writePrivate(this.credentialsPath, credentials);
  }

  private readJson<T>(file: string, schema: z.ZodType<T, z.ZodTypeDef, unknown>): T | null {
    let text: string;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    }
    const parsed = schema.safeParse(JSON.parse(text));
    if (!parsed.success) throw new Error(`${file} is not valid: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  }

  /** Written to a private temporary file first, then renamed: never half a file, never readable by others. */
  private writePrivate(file: string, value: unknown): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    fs.chmodSync(this.dir, 0o700);
    const tmp = `${file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o600, flag: "w" });
    fs.chmodSync(tmp, 0o600);
    fs.renameSync(tmp, file);
  }
}
