import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { z } from "zod";

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

/** `config.json`: defaults for flags, written by hand or by `pair` (never holds a secret). */
export const Settings = z.object({
  server: z.string().url().optional(),
  connectKey: z.string().optional(),
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

  writeSettings(settings: Settings): void {
    this.writePrivate(this.settingsPath, settings);
  }

  writeCredentials(credentials: Credentials): void {
    this.writePrivate(this.credentialsPath, credentials);
  }

  private readJson<T>(file: string, schema: z.ZodType<T>): T | null {
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
