import { Writable } from "node:stream";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseConfig } from "../../server/config.js";
import { createLogger } from "../../server/logger.js";
import { startServer, type RunningServer } from "../../server/server.js";
import type { Clock } from "../../server/clock.js";
import type { DatabaseTarget } from "../../server/db/open.js";
import type { NewKeys } from "../../server/keys/keys.js";
import { pgliteTemplate, type TestDatabase } from "./databases.js";
import { pgliteCopy } from "./templates.js";
import { openApiCheck } from "./openapi-check.js";

/**
 * A clock tests move by hand. Stopped (the default), it stands still between
 * `advance` calls; running, it follows real time plus what `advance` added, for
 * tests where real processes poll on real timers while the test jumps ahead.
 */
export class TestClock implements Clock {
  private t = Date.parse("2026-11-22T12:00:00Z");
  private readonly startedAt = Date.now();
  constructor(private readonly running = false) {}
  now() {
    return new Date(this.t + (this.running ? Date.now() - this.startedAt : 0));
  }
  advance(seconds: number) {
    this.t += seconds * 1000;
  }
}

export interface TestServerOptions {
  /** The clock follows real time (see TestClock). */
  runningClock?: boolean;
}

export interface TestServer extends RunningServer {
  clock: TestClock;
  /** Every log line written, raw. */
  logs: string[];
  /** Whatever the server printed outside the log (the dev-app banner). */
  printed: string[];
  /** The dev app's keys, from the banner of the first start (SVC_DEV_APP=1 unless `env` says otherwise). */
  dev: NewKeys;
  /** `fetch` against the server, path relative to its base URL. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
}

/**
 * The real server on a real port and database, with a test clock and captured logs. A fresh
 * in-memory PGlite (`dataDir: null`) is started as a copy of the migrated template on tmpfs
 * instead (see templates.ts), removed on close: the same fresh database, without creating a
 * cluster and migrating it for every server.
 */
export async function startTestServer(target: DatabaseTarget, env: Record<string, string> = {}, options: TestServerOptions = {}): Promise<TestServer> {
  const copy = target.kind === "pglite" && target.dataDir === null ? pgliteCopy(pgliteTemplate) : null;
  try {
    const server = await startOn(copy?.target ?? target, env, options);
    return copy ? { ...server, close: () => server.close().finally(() => copy.drop()) } : server;
  } catch (err) {
    await copy?.drop();
    throw err;
  }
}

async function startOn(database: DatabaseTarget, env: Record<string, string>, options: TestServerOptions): Promise<TestServer> {
  const logs: string[] = [];
  const printed: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      cb();
    },
  });
  const clock = new TestClock(options.runningClock ?? false);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-test-"));
  // SVC_DEV_APP=1: tests read the dev app's keys from the banner, on Postgres too (where a start
  // without the flag creates none). `SVC_DEV_APP: ""` in `env` leaves it unset (the operator's default).
  const config = parseConfig({ PORT: "0", SVC_DATA_DIR: dataDir, LOG_LEVEL: "info", SVC_DEV_APP: "1", ...env });
  const logger = createLogger(config.logLevel, sink);
  let dev: NewKeys | null = null;
  const server = await startServer({ config, logger, clock, database, print: (t) => printed.push(t) });
  // Every answer it gives is checked against openapi.json (a mismatch fails the test: openapi-check-setup.ts).
  openApiCheck().attach(server.http);
  // The banner is for people; tests read the keys from the same place a person would.
  const banner = printed.join("");
  const field = (label: string) => new RegExp(`${label}\\s+(\\S+)`).exec(banner)?.[1] ?? "";
  if (banner) dev = { appId: field("app ID"), environment: "test", appKey: field("app key"), connectKey: field("connect key") };
  return {
    ...server,
    clock,
    logs,
    printed,
    dev: dev!,
    fetch: (p, init) => fetch(`${server.url}${p}`, init),
    close: async () => {
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * The real server on a fresh database made for it (`db.create()`), for one suite;
 * its `close` also drops that database.
 */
export async function startTestServerOn(db: TestDatabase, env: Record<string, string> = {}, options: TestServerOptions = {}): Promise<TestServer> {
  const made = await db.create({ migrated: true });
  const server = await startTestServer(made.target, env, options).catch(async (err) => {
    await made.drop();
    throw err;
  });
  return {
    ...server,
    close: async () => {
      await server.close();
      await made.drop();
    },
  };
}
