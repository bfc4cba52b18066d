import fs from "node:fs";
import path from "node:path";
import type { Config } from "../config.js";
import { openDatabase } from "../db/open.js";
import { migrate } from "../db/migrate.js";
import { KeyService } from "../keys/keys.js";
import { OwnerService } from "../owners/owners.js";
import { RateLimiter } from "../rate-limit/rate-limiter.js";
import { systemClock } from "../clock.js";
import { baseUrlOf } from "../config.js";
import { runOperation } from "../admin/operations.js";
import { callAdminSocket } from "../admin/socket.js";
import { adminSocketPath, DataDirLockedError, lockDataDir } from "../data-dir-lock.js";

export type Call = (op: string, args: unknown) => Promise<unknown>;

export class CliError extends Error {}

/**
 * Runs `fn` against the service's data, whether or not the server is running:
 * - Postgres (`DATABASE_URL`): connects directly; any number of processes may.
 * - Embedded database, folder free: takes the folder's lock and opens it itself.
 * - Embedded database held by a running server: goes through that server's admin socket.
 * Only `mayCreate` (creating an app) may make a new embedded database: anything else run
 * where there is none (a wrong folder, say) says where it looked instead of leaving an empty one.
 */
export async function withAdmin<T>(config: Config, fn: (call: Call) => Promise<T>, opts: { mayCreate: boolean } = { mayCreate: false }): Promise<T> {
  if (config.database.kind === "postgres") return direct(config, fn);
  const pgliteDir = config.database.dataDir;
  const missing = () =>
    new CliError(
      `No database in the data folder ${config.dataDir} (looked for ${pgliteDir}): nothing was created.\n` +
        "Point at the right folder (--data-dir or SVC_DATA_DIR; it is the folder the server was started with, .data by default), or create the first app there: svc apps create --name <name>.",
    );
  // No folder at all: no server can hold it either; the lock would create it.
  if (!opts.mayCreate && !fs.existsSync(config.dataDir)) throw missing();
  let release: (() => Promise<void>) | null = null;
  try {
    release = await lockDataDir(config.dataDir, () => {});
  } catch (err) {
    if (!(err instanceof DataDirLockedError)) throw err;
    const socket = adminSocketPath(config.dataDir);
    if (!fs.existsSync(socket)) {
      throw new CliError(
        `${err.message}\nNo server answers on ${socket}: if a server is starting, try again in a moment; if no svc process is running, the lock is taken at once (or, where its holder cannot be checked, once it is 10 seconds stale).`,
      );
    }
    return fn((op, args) =>
      callAdminSocket(socket, op, args).catch((e: NodeJS.ErrnoException) => {
        if (e.code === "ECONNREFUSED" || e.code === "ENOENT") throw new CliError(`${err.message}\nIts admin socket ${socket} does not answer.`);
        throw e;
      }),
    );
  }
  try {
    if (!opts.mayCreate && !embeddedDatabaseExists(pgliteDir)) throw missing();
    return await direct(config, fn);
  } finally {
    await release();
  }
}

/** PGlite's folder holds a cluster once `PG_VERSION` is written (the first open writes it). */
function embeddedDatabaseExists(pgliteDir: string): boolean {
  return fs.existsSync(path.join(pgliteDir, "PG_VERSION"));
}

async function direct<T>(config: Config, fn: (call: Call) => Promise<T>): Promise<T> {
  const db = await openDatabase(config.database);
  try {
    await migrate(db);
    // Its changes are announced to running instances (on Postgres), which drop the keys from their caches.
    const keys = new KeyService(db.prisma, systemClock, db);
    const owners = new OwnerService(db.prisma, systemClock, new RateLimiter(db.prisma, systemClock), keys);
    // No server holds the data: links name where it will listen (PUBLIC_URL, else HOST and PORT).
    return await fn((op, args) => runOperation({ keys, owners, baseUrl: baseUrlOf(config, config.port) }, op, args));
  } finally {
    await db.close();
  }
}
