import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { parseConfig } from "../server/config.js";
import { createLogger } from "../server/logger.js";
import { startServer, type RunningServer } from "../server/server.js";
import type { DatabaseTarget } from "../server/db/open.js";
import { pairInto } from "../test/helpers/pair-via-api.js";

/** The repository root (the cwd of the processes the bench starts). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

const tempDirs: string[] = [];
export function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}
export function removeTempDirs(): void {
  for (const d of tempDirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
}

export interface BenchServer extends RunningServer {
  appId: string;
  appKey: string;
  connectKey: string;
}

/**
 * The real server in this process, as the tests start it (test/helpers/server.ts),
 * but on the system clock and at the default log level (SVC_BENCH_LOG_LEVEL to
 * change it), its lines serialised as in production, then dropped.
 */
export async function startBenchServer(database: DatabaseTarget): Promise<BenchServer> {
  const sink = new Writable({ write: (_chunk, _enc, cb) => cb() });
  const dataDir = tempDir("svc-bench-");
  // SVC_DEV_APP=1: the benchmarks use the dev app's keys from the banner, on Postgres too.
  // MAX_STREAMS_PER_APP: the stream scenarios open SVC_BENCH_STREAMS (1,000 by default) at once for one app.
  const config = parseConfig({ PORT: "0", SVC_DATA_DIR: dataDir, LOG_LEVEL: process.env.SVC_BENCH_LOG_LEVEL ?? "info", SVC_DEV_APP: "1", MAX_STREAMS_PER_APP: "100000" });
  const printed: string[] = [];
  const server = await startServer({ config, logger: createLogger(config.logLevel, sink), database, print: (t) => printed.push(t) });
  const banner = printed.join("");
  const field = (label: string) => new RegExp(`${label}\\s+(\\S+)`).exec(banner)?.[1] ?? "";
  return { ...server, appId: field("app ID"), appKey: field("app key"), connectKey: field("connect key") };
}

/** Pairs a machine for `user` through the real endpoints (test/helpers/pair-via-api.ts); returns its config folder. */
export async function pairMachine(server: { url: string; appKey: string; connectKey: string }, user: string, settings: Record<string, unknown>): Promise<string> {
  // The benches load one machine with many jobs at once (1,000 streams): no cap below that.
  return (await pairInto(tempDir("svc-bench-worker-"), { url: server.url }, server, user, { maxConcurrentJobs: 1024, ...settings }, "bench-machine")).home;
}

/** Every child still running: killed when the bench exits, however it exits (and the temp folders go). */
const children = new Set<Child>();
process.on("exit", () => {
  for (const c of children) c.stop();
  removeTempDirs();
});

/** A child process of the bench, in its own process group; its output kept until `quiet()`. */
export class Child {
  out = "";
  private keep = true;
  private closed = false;
  constructor(readonly child: ChildProcess) {
    children.add(this);
    child.once("exit", () => children.delete(this));
    // Quiet, only the last few KB are kept (for an error message).
    const take = (c: Buffer) => {
      this.out += c;
      if (!this.keep && this.out.length > 8192) this.out = this.out.slice(-4096);
    };
    child.stdout!.on("data", take);
    child.stderr!.on("data", take);
  }
  async waitFor(pattern: RegExp, timeoutMs = 30_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = pattern.exec(this.out);
      if (m) return m;
      if (this.child.exitCode !== null && !this.closed) {
        // Exited: its output may still be in the pipe ('exit' comes before the last of it is read); 'close' after.
        await new Promise((r) => (this.child.stdout!.readableEnded ? r(null) : this.child.stdout!.once("close", r)));
        this.closed = true;
        continue;
      }
      if (this.child.exitCode !== null || Date.now() > deadline) throw new Error(`never printed ${pattern}:\n${this.out}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /** What it is: running, or how it exited, and the end of its output. */
  describe(): string {
    const state = this.child.exitCode !== null || this.child.signalCode !== null ? `exited (${this.child.exitCode ?? this.child.signalCode})` : "running";
    return `${state}; its last output:\n${this.out.slice(-2000)}`;
  }
  /** Keeps only the end of its output from now on (still read, so its pipe never fills). */
  quiet(): void {
    this.keep = false;
    this.out = "";
  }
  /** SIGINT to its group (it ends cleanly and writes e.g. a --cpu-prof profile), SIGKILL after `ms`. */
  async stopGently(ms = 5000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once("exit", r));
    try {
      process.kill(-this.child.pid!, "SIGINT");
    } catch {
      return;
    }
    await Promise.race([exited, new Promise((r) => setTimeout(r, ms))]);
    this.stop();
  }
  stop(): void {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    try {
      process.kill(-this.child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  }
}

export function spawnNode(args: string[], env: NodeJS.ProcessEnv = {}): Child {
  return new Child(spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true }));
}

/** `svc-worker start` as an end user runs it (node worker/bin/svc-worker.js). */
export function spawnWorker(home: string, env: NodeJS.ProcessEnv = {}): Child {
  return spawnNode(["worker/bin/svc-worker.js", "start"], { SVC_WORKER_HOME: home, ...env });
}

/** A fresh database on the Postgres at `adminUrl`, and how to drop it; null when it cannot be reached. */
export async function scratchPostgres(adminUrl: string): Promise<{ url: string; drop(): Promise<void> } | { error: string }> {
  const withClient = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end().catch(() => {});
    }
  };
  const name = `svc_bench_${Date.now().toString(36)}_${process.pid}`;
  try {
    await withClient((c) => c.query(`CREATE DATABASE ${name}`));
  } catch (err) {
    return { error: (err as Error).message || String(err) };
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => withClient((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => {}) };
}

/**
 * A database as a deployment's is after it has run a while: `runs` finished runs (with their ledger
 * rows) of another app's users, spread over the last 30 days, then `ANALYZE` (autovacuum's job in a
 * deployment). Without it a bench measures a fresh database's first burst: with no statistics yet,
 * Postgres plans the key checks of `usage_rows` against `runs` on the app's index rather than the
 * run's key (an equality on two columns without statistics looks more selective than a unique key
 * under ≈ 40,000 rows), keeps that plan in each pooled connection, and scans all of the app's runs
 * at every check, until the first `ANALYZE` (measured: 3.5–3.9 ms a check under 1,000 streams).
 */
export async function seedHistory(db: { query(text: string, params?: unknown[]): Promise<unknown> }, runs: number): Promise<void> {
  if (runs <= 0) return;
  await db.query(`INSERT INTO apps (id, name) VALUES ('app_bench_history', 'history') ON CONFLICT DO NOTHING`);
  await db.query(
    `INSERT INTO end_users (id, app_id, environment, external_id) SELECT 'eu_bench_history_' || g, 'app_bench_history', 'live', 'history-' || g FROM generate_series(1, GREATEST(1, $1::int / 50)) g ON CONFLICT DO NOTHING`,
    [runs],
  );
  await db.query(
    `INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status, turns, created_at, finished_at, last_seq, input_tokens, output_tokens)
     SELECT 'run_bench_history_' || g, 'app_bench_history', 'live', 'eu_bench_history_' || (1 + g % GREATEST(1, $1::int / 50)), 'chat', 'standin/paced64', '{}'::jsonb, 'completed', 1,
            now() - (g * interval '30 days' / $1::int), now() - (g * interval '30 days' / $1::int) + interval '2 seconds', 66, 12, 64
       FROM generate_series(1, $1::int) g ON CONFLICT DO NOTHING`,
    [runs],
  );
  await db.query(
    `INSERT INTO usage_rows (app_id, environment, end_user_id, run_id, cost_class, kind, input_tokens, output_tokens, amount_micros, period, unique_key, created_at)
     SELECT r.app_id, r.environment, r.end_user_id, r.id, 'user_hardware', 'run', 12, 64, 0, to_char(r.created_at, 'YYYY-MM'), 'run:' || r.id, r.created_at
       FROM runs r WHERE r.app_id = 'app_bench_history' ON CONFLICT DO NOTHING`,
  );
  // The tables written here only: a table analysed empty (tool_calls, say) would be planned as empty while it fills.
  await db.query(`ANALYZE apps, end_users, runs, usage_rows`);
}

/** Nearest-rank percentile of samples (ms). */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** CPU time (user + system, ms) used so far by the processes of a process group (Linux /proc; NaN elsewhere). */
export function groupCpuMs(pgid: number): number {
  let ticks = 0;
  try {
    for (const d of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(d)) continue;
      let stat: string;
      try {
        stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      } catch {
        continue; // gone meanwhile
      }
      // After "(comm) ": state, ppid, pgrp, ... utime (14th field), stime (15th), in clock ticks (100 a second).
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(f[2]) === pgid) ticks += Number(f[11]) + Number(f[12]);
    }
  } catch {
    return NaN;
  }
  return ticks * 10;
}

/** CPU time (user + system, ms) used so far by one process, all its threads (Linux /proc; NaN elsewhere or once it is gone). */
export function pidCpuMs(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return NaN;
  }
}

/** CPU time (ms) this process has used so far. */
export function ownCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}


/**
 * Gives the bench's database the statistics a deployment's has (Postgres's autovacuum, or
 * the embedded database's upkeep, analyses tables within a minute of their changes): a
 * fresh scratch database has none, and without them the planner reads a run through the
 * app's index of runs by date (every row naming a run pays a check reading all of the
 * app's runs). Called after a bench's warm-up; `SVC_BENCH_ANALYZE=0` measures the
 * database as it is (a fresh one, before autovacuum's first pass).
 */
export async function withStatistics(db: { query(sql: string): Promise<unknown> }): Promise<void> {
  if (process.env.SVC_BENCH_ANALYZE !== "0") await db.query("ANALYZE");
}
