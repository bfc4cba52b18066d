import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { ROOT, tempDir } from "./process.js";

/**
 * A real `svc-worker` process (`node worker/bin/svc-worker.js ...`), as an end
 * user runs it, with its own config folder. Output is captured as it comes.
 */
export class WorkerProcess {
  stdout = "";
  stderr = "";
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(
    readonly child: ChildProcess,
    readonly home: string,
  ) {
    child.stdout!.on("data", (c) => (this.stdout += c));
    child.stderr!.on("data", (c) => (this.stderr += c));
    this.exited = new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
  }

  /** The one-time code it printed (`XXXX-XXXX`), once it has. */
  async userCode(timeoutMs = 30_000): Promise<string> {
    const line = await this.waitFor(/one-time code: ([A-Z]{4}-[A-Z]{4})/, timeoutMs);
    return line[1];
  }

  async waitFor(pattern: RegExp, timeoutMs = 30_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = pattern.exec(this.stdout);
      if (m) return m;
      if (this.child.exitCode !== null || Date.now() > deadline) {
        throw new Error(`worker output never matched ${pattern}\nstdout: ${this.stdout}\nstderr: ${this.stderr}`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** Kills it and whatever it started (its own process group). */
  stop(): void {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    try {
      process.kill(-this.child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  }
}

/** Starts `svc-worker <args>` with a fresh config folder (or `home`); does not wait. */
export function spawnWorker(args: string[], home = tempDir("svc-worker-home-"), extraEnv: NodeJS.ProcessEnv = {}): WorkerProcess {
  const env: NodeJS.ProcessEnv = { ...process.env, SVC_WORKER_HOME: home, ...extraEnv };
  const child = spawn(process.execPath, ["worker/bin/svc-worker.js", ...args], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  return new WorkerProcess(child, home);
}

/** `svc-worker pair` against a server. */
export function spawnPair(serverUrl: string, connectKey: string, home?: string): WorkerProcess {
  return spawnWorker(["pair", "--connect-key", connectKey, "--server", serverUrl], home);
}

export interface PairedMachine {
  home: string;
  machineId: string;
  token: string;
  /** The session of the user who approved it. */
  session: string;
}

/**
 * Pairs a machine for `user` through the real endpoints (code, session, approve,
 * token) and writes what `svc-worker pair` would have written into a fresh config
 * folder, with `settings` as its config.json.
 */
export async function pairViaApi(
  server: { url: string; fetch(path: string, init?: RequestInit): Promise<Response> },
  keys: { appKey: string; connectKey: string },
  user: string,
  settings: Record<string, unknown> = {},
  hostname = "test-machine",
): Promise<PairedMachine> {
  const post = async (path: string, body: unknown, token?: string) => {
    const res = await server.fetch(path, { method: "POST", headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });
    const json = (await res.json()) as Record<string, string>;
    if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${JSON.stringify(json)}`);
    return json;
  };
  const code = await post(`/c/${keys.connectKey}/v1/device/code`, { hostname, platform: "linux", arch: "x64", client: "svc-worker" });
  const { session } = await post("/v1/end_users/session", { user }, keys.appKey);
  await post("/v1/device/approve", { user_code: code.user_code }, session);
  const t = await post(`/c/${keys.connectKey}/v1/device/token`, { device_code: code.device_code });
  const home = tempDir("svc-worker-home-");
  fs.writeFileSync(
    path.join(home, "credentials.json"),
    JSON.stringify({ server: t.server_url, connectUrl: t.connect_url, machineId: t.machine_id, pairingToken: t.pairing_token, environment: t.environment, appName: t.app_name, pairedAt: new Date().toISOString() }),
    { mode: 0o600 },
  );
  fs.writeFileSync(path.join(home, "config.json"), JSON.stringify(settings), { mode: 0o600 });
  return { home, machineId: t.machine_id, token: t.pairing_token, session };
}
