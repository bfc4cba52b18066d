import { spawn, type ChildProcess } from "node:child_process";
import { testNode } from "../../scripts/test-tools.mjs";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import type { NewKeys } from "../../server/keys/keys.js";

/**
 * Real processes for the tests that must see what a person sees: the `svc` CLI
 * (`node bin/svc.js`) and the server as `npm start` runs it (`node dist/server/main.js`, the
 * production build, kept current by the tests' global setup),
 * spawned with a clean environment, their output captured line by line.
 */

/** The repository root: the cwd of every spawned process. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The configuration variables the service reads: never inherited from the test runner's environment. */
const CONFIG_VARS = ["PORT", "HOST", "DATABASE_URL", "SVC_DATA_DIR", "PUBLIC_URL", "LOG_LEVEL", "MAX_BODY_BYTES", "MAX_BODY_DEPTH", "MAX_STREAMS_PER_APP", "TRUST_PROXY", "DEVICE_POLL_INTERVAL"];

function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const name of CONFIG_VARS) delete base[name];
  return { ...base, ...env };
}

const tempDirs = new Set<string>();

/** A fresh, empty folder under the system temp folder, removed by `removeTempDirs`. */
export function tempDir(prefix = "svc-proc-"): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

export function removeTempDirs(): void {
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Output extends Exit {
  stdout: string;
  stderr: string;
}

/** Every child still running: `stopAll` ends them whatever happened in the test. */
const live = new Set<{ stop(): Promise<unknown> }>();

/** Ends every child process the helpers started and that is still running. */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.stop()));
}

function exitOf(child: ChildProcess): Promise<Exit> {
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal }));
  });
}

/**
 * Runs the CLI to its end: `node bin/svc.js ...args`. bin/svc.js runs the CLI in a
 * child of its own, so the CLI gets its own process group, killed as a whole on timeout.
 */
export async function runCli(args: string[], env: Record<string, string>, timeoutMs = 45_000): Promise<Output> {
  const child = spawn(process.execPath, ["bin/svc.js", ...args], {
    cwd: ROOT,
    env: childEnv({ LOG_LEVEL: "silent", ...env }),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  const kill = () => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  };
  const handle = { stop: async () => kill() };
  live.add(handle);
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (c) => (stdout += c));
  child.stderr!.on("data", (c) => (stderr += c));
  const timer = setTimeout(kill, timeoutMs);
  try {
    const exit = await exitOf(child);
    if (exit.signal === "SIGKILL") throw new Error(`svc ${args.join(" ")} did not finish within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`);
    return { ...exit, stdout, stderr };
  } finally {
    clearTimeout(timer);
    live.delete(handle);
  }
}

/** A successful `--json` command's result: exit 0, nothing on stderr, exactly one JSON line on stdout. */
export function jsonOf<T = unknown>(r: Output): T {
  const where = `stdout: ${r.stdout}\nstderr: ${r.stderr}`;
  expect(r.code, where).toBe(0);
  expect(r.stderr, where).toBe("");
  const lines = r.stdout.split("\n").filter((l) => l !== "");
  expect(lines, where).toHaveLength(1);
  expect(r.stdout.endsWith("\n"), where).toBe(true);
  return JSON.parse(lines[0]) as T;
}

export interface Line {
  stream: "stdout" | "stderr";
  text: string;
}

/** The server as a child process, as `npm start` runs it: `node --enable-source-maps dist/server/main.js`. */
export class ServerProcess {
  /** Every complete line the process wrote, in order, per stream. */
  readonly lines: Line[] = [];
  /** The base URL from the "listening" log line. */
  url = "";
  readonly exited: Promise<Exit>;
  private exit: Exit | null = null;
  private readonly partial = { stdout: "", stderr: "" };

  constructor(
    readonly dataDir: string,
    readonly env: Record<string, string>,
    readonly child: ChildProcess,
  ) {
    for (const stream of ["stdout", "stderr"] as const) {
      child[stream]!.setEncoding("utf8");
      child[stream]!.on("data", (chunk: string) => {
        const parts = (this.partial[stream] + chunk).split("\n");
        this.partial[stream] = parts.pop()!;
        for (const text of parts) this.lines.push({ stream, text });
      });
    }
    this.exited = exitOf(child).then((e) => {
      for (const stream of ["stdout", "stderr"] as const) {
        if (this.partial[stream]) this.lines.push({ stream, text: this.partial[stream] });
        this.partial[stream] = "";
      }
      this.exit = e;
      live.delete(this);
      return e;
    });
    live.add(this);
  }

  get running(): boolean {
    return this.exit === null;
  }

  text(stream: "stdout" | "stderr"): string {
    return this.lines
      .filter((l) => l.stream === stream)
      .map((l) => l.text)
      .join("\n");
  }

  /** The JSON log lines (stdout lines that parse as an object). */
  logs(): Record<string, unknown>[] {
    return this.lines.flatMap((l) => {
      if (l.stream !== "stdout" || !l.text.startsWith("{")) return [];
      try {
        return [JSON.parse(l.text) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
  }

  /** The stdout lines that are not JSON log lines: the dev-app banner, when there is one. */
  bannerLines(): string[] {
    return this.lines.filter((l) => l.stream === "stdout" && !l.text.startsWith("{")).map((l) => l.text);
  }

  /** The dev app's keys as the banner shows them, or null without a banner. */
  banner(): (NewKeys & { baseUrl: string }) | null {
    const text = this.bannerLines().join("\n");
    if (!/A local development app was created/.test(text)) return null;
    const field = (label: string) => new RegExp(`${label}\\s+(\\S+)`).exec(text)?.[1] ?? "";
    return {
      baseUrl: field("base URL"),
      appId: field("app ID"),
      environment: /environment: (\w+)/.exec(text)?.[1] as NewKeys["environment"],
      appKey: field("app key"),
      connectKey: field("connect key"),
    };
  }

  fetch(p: string, init?: RequestInit): Promise<Response> {
    return fetch(`${this.url}${p}`, init);
  }

  /** Sends `signal`, waits for the exit; SIGKILL if it has not exited after `timeoutMs`. */
  async stop(signal: NodeJS.Signals = "SIGTERM", timeoutMs = 20_000): Promise<Exit> {
    if (!this.running) return this.exit!;
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Everything it wrote, for assertion messages. */
  output(): string {
    return this.lines.map((l) => `[${l.stream}] ${l.text}`).join("\n");
  }
}

/** Spawns the server on `dataDir` (PORT=0 unless `env` says otherwise); does not wait. */
export function spawnServer(dataDir: string, env: Record<string, string> = {}): ServerProcess {
  const fullEnv = { PORT: "0", SVC_DATA_DIR: dataDir, ...env };
  const child = spawn(process.execPath, ["--enable-source-maps", "dist/server/main.js"], {
    cwd: ROOT,
    env: childEnv(fullEnv),
    stdio: ["ignore", "pipe", "pipe"],
  });
  return new ServerProcess(dataDir, fullEnv, child);
}

/** Starts the server and waits for its "listening" log line; fails with its output if it exits first. */
export async function startServerProcess(dataDir: string, env: Record<string, string> = {}, timeoutMs = 45_000): Promise<ServerProcess> {
  const server = spawnServer(dataDir, env);
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const listening = server.logs().find((l) => l.msg === "listening");
    if (listening) {
      server.url = String(listening.url);
      return server;
    }
    if (!server.running) throw new Error(`the server exited (${JSON.stringify(await server.exited)}) before listening:\n${server.output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  await server.stop("SIGKILL");
  throw new Error(`the server did not log "listening" within ${timeoutMs} ms:\n${server.output()}`);
}

/** Runs the server until it exits on its own (configuration errors, a locked folder); killed after `timeoutMs`. */
export async function runServerToExit(dataDir: string, env: Record<string, string> = {}, timeoutMs = 30_000): Promise<Output & { server: ServerProcess }> {
  const server = spawnServer(dataDir, env);
  const timer = setTimeout(() => server.child.kill("SIGKILL"), timeoutMs);
  // Should it start after all, stop it at once (the caller's assertions then fail on the exit code).
  const poll = setInterval(() => {
    if (server.logs().some((l) => l.msg === "listening")) server.child.kill("SIGTERM");
  }, 100);
  try {
    const exit = await server.exited;
    return { ...exit, stdout: server.text("stdout"), stderr: server.text("stderr"), server };
  } finally {
    clearTimeout(timer);
    clearInterval(poll);
  }
}

/** Polls `fn` until `ok` accepts what it returns, and returns that; fails naming `what` and the last value. */
export async function pollUntil<T>(fn: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 20_000, what = "condition"): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what} not reached within ${timeoutMs} ms; last: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits for the lines a process writes to land (the log is asynchronous to the HTTP answer). */
export async function until(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * The tests' Node binary of this major (test/tools), for a test that runs a reader's program on it: in CI
 * (where it must be there) its absence fails the test; elsewhere the test is skipped, saying why.
 */
export function nodeOf(major: number, ctx: { skip(note?: string): never }, what: string): string {
  const bin = testNode(major);
  if (bin) return bin;
  const why = `no Node ${major} binary in test/tools for ${process.platform}-${process.arch}`;
  if (process.env.CI) throw new Error(`${why}; CI must run ${what} on Node ${major}`);
  return ctx.skip(why);
}
