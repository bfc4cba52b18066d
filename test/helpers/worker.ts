import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { spawn, type ChildProcess } from "node:child_process";
import { afterAll, beforeAll } from "vitest";
import { pollUntil, removeTempDirs, ROOT, tempDir } from "./process.js";
import type { TestDatabase } from "./databases.js";
import { startTestServerOn, type TestServer } from "./server.js";
import { startModelStandIn, type ModelStandIn } from "./standins.js";
import { pairInto, type PairedMachine } from "./pair-via-api.js";

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
export function spawnWorker(args: string[], home = tempDir("svc-worker-home-"), extraEnv: NodeJS.ProcessEnv = {}, wrapper: string[] = []): WorkerProcess {
  const env: NodeJS.ProcessEnv = { ...process.env, SVC_WORKER_HOME: home, ...extraEnv };
  // `wrapper`: a command the worker runs under (a namespace that forbids the sandbox's), before node.
  const [command, ...argv] = [...wrapper, process.execPath, "worker/bin/svc-worker.js", ...args];
  const child = spawn(command, argv, { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  return new WorkerProcess(child, home);
}

/** `svc-worker pair` against a server. */
export function spawnPair(serverUrl: string, connectKey: string, home?: string): WorkerProcess {
  return spawnWorker(["pair", "--connect-key", connectKey, "--server", serverUrl], home);
}

export type { PairedMachine };

/** `pairInto` (test/helpers/pair-via-api.ts) a fresh temporary config folder. */
export function pairViaApi(
  server: { url: string; fetch(path: string, init?: RequestInit): Promise<Response> },
  keys: { appKey: string; connectKey: string },
  user: string,
  settings: Record<string, unknown> = {},
  hostname = "test-machine",
): Promise<PairedMachine> {
  return pairInto(tempDir("svc-worker-home-"), server, keys, user, settings, hostname);
}

/**
 * A user's machine serving a model stand-in as its `ollama`, ready for runs:
 * paired through the API, `svc-worker start` connected, and its runtime
 * advertised (what routing reads), so a run started now reaches it.
 */
export async function startModelMachine(
  server: { url: string; fetch(path: string, init?: RequestInit): Promise<Response> },
  keys: { appKey: string; connectKey: string },
  user: string,
  modelUrl: string,
  settings: Record<string, unknown> = {},
): Promise<WorkerProcess> {
  const m = await pairViaApi(server, keys, user, { runtimes: { ollama: modelUrl, llamacpp: false, lmstudio: false, claude: false, codex: false }, ...settings });
  const worker = spawnWorker(["start"], m.home);
  try {
    await worker.waitFor(/Connected/);
    const headers = { authorization: `Bearer ${keys.appKey}` };
    const advertised = async () => ((await (await server.fetch(`/v1/models?user=${encodeURIComponent(user)}`, { headers })).json()) as { data: { owned_by: string }[] }).data.some((x) => x.owned_by === "ollama");
    await pollUntil(advertised, (ok) => ok, 20_000, "the worker's runtimes advertised");
  } catch (err) {
    worker.stop();
    throw err;
  }
  return worker;
}

/**
 * Whether agent CLIs (fakes included) are run inside the sandbox in tests: where the
 * machine has one (CI installs bubblewrap and sets SVC_TEST_SANDBOX=1); elsewhere
 * the suites that only need a CLI run it unconfined, and the sandbox's own suites skip.
 */
export const SANDBOX_REQUIRED = detectSandbox().kind !== null || process.env.SVC_TEST_SANDBOX === "1";


/**
 * Registers, in the calling suite, a real server on `db` (running clock), the model stand-in and a
 * real worker process of `user` serving it (`startModelMachine`), stopped after the suite: what the
 * suites of chat completions and responses against a user's model runtime share.
 */
export function withModelMachine(db: TestDatabase, user = "alice"): { readonly server: TestServer; readonly model: ModelStandIn; readonly worker: WorkerProcess } {
  const at = {} as { server: TestServer; model: ModelStandIn; worker: WorkerProcess };
  beforeAll(async () => {
    at.server = await startTestServerOn(db, {}, { runningClock: true });
    at.model = await startModelStandIn();
    at.worker = await startModelMachine(at.server, at.server.dev, user, at.model.url);
  }, 60_000);
  afterAll(async () => {
    at.worker?.stop();
    await at.server?.close();
    await at.model?.close();
    removeTempDirs();
  });
  return at;
}
