import fs from "node:fs";
import { createHash } from "node:crypto";
import { AsyncResource } from "node:async_hooks";
import { PGlite } from "@electric-sql/pglite";
import { PrismaPGlite } from "pglite-prisma-adapter";
import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import type { SqlDriverAdapterFactory } from "@prisma/driver-adapter-utils";
import { PrismaClient } from "./generated/client.js";
import { statementSent } from "./outage.js";
import { dbTimer } from "../http/server-timing.js";

/**
 * A pool client that counts each statement it sends for the request it runs in (see
 * `requestScope`); one refused at once because the connection is known dead is not sent.
 */
class CountingClient extends pg.Client {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  override query(...args: any[]): any {
    const state = this as unknown as { _ended?: boolean; _ending?: boolean; _queryable?: boolean };
    if (!state._ended && !state._ending && state._queryable !== false) statementSent();
    // Its time, sent to answered, goes to the request's Server-Timing (a callback's or a promise's end).
    const done = dbTimer();
    const last = args.length - 1;
    if (typeof args[last] === "function") {
      const cb = args[last];
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      args[last] = (...r: any[]) => {
        done();
        return cb(...r);
      };
    }
    // The overload the arguments pick, as pg picks it: `query` is called with them as they came.
    const result = Reflect.apply(super.query, this, args);
    if (result && typeof result.then === "function") result.then(done, done);
    return result;
  }
}

/**
 * A pool whose callbacks run in their caller's async context: pg-pool calls a waiting
 * query's callback from whichever client was released, so without this a statement
 * could be counted for another request (and a request that did write could say it
 * created nothing).
 */
class ScopedPool extends pg.Pool {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  override connect(...args: any[]): any {
    const [cb] = args;
    return typeof cb === "function" ? super.connect(AsyncResource.bind(cb)) : super.connect();
  }
}

export type Prisma = PrismaClient;

/** A Prisma transaction client (the argument of `$transaction`'s callback): the one transaction type of the code base. */
export type Tx = Parameters<Parameters<Prisma["$transaction"]>[0]>[0];

/**
 * One database handle: the Prisma client for the data layer and raw SQL for the
 * migration runner, on embedded PGlite or on Postgres. Same schema, same code path.
 */
export interface Sql {
  /** Runs SQL that may hold several statements, without parameters. */
  exec(sql: string): Promise<void>;
  /** One parameterised statement; `prepared`: see `QueryOptions`. */
  query<T = Record<string, unknown>>(sql: string, params?: unknown[], options?: QueryOptions): Promise<T[]>;
}

export interface QueryOptions {
  /**
   * A hot statement of fixed text (a run's step, an answer): on Postgres it is
   * prepared once per connection, by a name derived from its text, and then only
   * bound and run (parsing and, once Postgres settles on a generic plan, planning
   * are saved; a run's step spent ≈ 0.8 of its 1.5 ms there). PGlite ignores it.
   * A pooler in front of Postgres must pass protocol-level prepared statements
   * (PgBouncer ≥ 1.21 with `max_prepared_statements`).
   */
  prepared?: boolean;
}

const statementNames = new Map<string, string>();
/** The name a statement is prepared under: the same text, the same name, on every connection and instance. */
function statementName(text: string): string {
  let name = statementNames.get(text);
  if (!name) statementNames.set(text, (name = `svc_${createHash("sha1").update(text).digest("hex").slice(0, 24)}`));
  return name;
}

/** Wakes whoever listens on a channel, in every process sharing the database (Postgres LISTEN/NOTIFY). */
export interface Notifications {
  /**
   * Calls `fn` with each payload sent on `channel` from now on; the returned function stops listening.
   * `resumed` is called each time listening starts again after its connection was lost: what was sent
   * in between is lost, so the listener looks for itself.
   */
  listen(channel: string, fn: (payload: string) => void, resumed?: () => void): Promise<() => Promise<void>>;
  notify(channel: string, payload: string): Promise<void>;
}

export interface Database extends Sql, Notifications {
  kind: "pglite" | "postgres";
  prisma: PrismaClient;
  /** Runs `fn` on one connection holding a session-level advisory lock (one process at a time). */
  exclusive<T>(lockKey: number, fn: (sql: Sql) => Promise<T>): Promise<T>;
  /** The connection pool now (Postgres: the pg Pool's counts); null on PGlite, which is one connection in the process. */
  poolStats(): { total: number; idle: number; waiting: number } | null;
  close(): Promise<void>;
}

/**
 * Postgres: `url` for the pool (`poolSize` connections at most). `directUrl`: `url`
 * goes through a pooler in transaction mode (PgBouncer), and this is a direct
 * connection to the same database for what needs a session of its own: LISTEN and
 * the session-level advisory lock of migrations and the first start.
 */
export type DatabaseTarget = { kind: "pglite"; dataDir: string | null } | { kind: "postgres"; url: string; directUrl?: string; poolSize?: number };

export async function openDatabase(target: DatabaseTarget): Promise<Database> {
  return target.kind === "pglite" ? openPGlite(target.dataDir) : openPostgres(target);
}

const PGLITE_SHARED_BUFFERS = "16MB";

/** `dataDir: null` is an in-memory database (tests). */
async function openPGlite(dataDir: string | null): Promise<Database> {
  if (dataDir) fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // Postgres's own 128 MB of shared buffers is allocated and cleared in PGlite's WebAssembly memory at every open:
  // 16 MB (Postgres's default before 9.3) opens in 0.84 s of CPU instead of 1.2 s (wall 0.6 s instead of 1.0 s),
  // which every `svc` command and every start pays, with the same statement speed on this project's tables (6,000
  // inserts and reads: 1.9-2.0 s either way). Pages beyond it are read from the folder's files, which the OS caches.
  const startParams = [...PGlite.defaultStartParams, "-c", `shared_buffers=${PGLITE_SHARED_BUFFERS}`];
  const db = dataDir ? new PGlite(dataDir, { startParams }) : new PGlite({ startParams });
  await db.waitReady;
  // Every statement (a query, an exec, a transaction's) passes through execProtocolStream: its time goes to the request's Server-Timing.
  const exec = db.execProtocolStream.bind(db);
  db.execProtocolStream = async (...args: Parameters<typeof exec>) => {
    const done = dbTimer();
    try {
      return await exec(...args);
    } finally {
      done();
    }
  };
  // pglite-prisma-adapter pins an older @prisma/driver-adapter-utils: same runtime
  // shape, distinct type identity, hence the cast.
  const prisma = new PrismaClient({ adapter: new PrismaPGlite(db) as unknown as SqlDriverAdapterFactory });
  const sql: Sql = {
    exec: async (text) => {
      await db.exec(text);
    },
    query: async <T>(text: string, params: unknown[] = []) => (await db.query<T>(text, params)).rows,
  };
  return {
    kind: "pglite",
    prisma,
    ...sql,
    poolStats: () => null,
    // PGlite is one connection in one process: nothing else can run in between.
    exclusive: (_lockKey, fn) => fn(sql),

    listen: async (channel, fn) => {
      const stop = await db.listen(channel, fn);
      return async () => stop();
    },
    notify: async (channel, payload) => {
      await db.query("SELECT pg_notify($1, $2)", [channel, payload]);
    },
    close: async () => {
      await prisma.$disconnect();
      await db.close();
    },
  };
}

async function openPostgres(target: { url: string; directUrl?: string; poolSize?: number }): Promise<Database> {
  const { url } = target;
  // Through a pooler in transaction mode each statement may run on another server connection: no named
  // statements (PgBouncer keeps them only from 1.21, with max_prepared_statements), and sessions on the direct URL.
  const pooled = target.directUrl !== undefined;
  const sessionUrl = target.directUrl ?? url;
  // A database that does not answer (a partition, not a refusal) fails a request after 10 s (503) instead of holding it.
  const pool = new ScopedPool({ connectionString: url, max: target.poolSize ?? 10, connectionTimeoutMillis: 10_000, Client: CountingClient });
  // An idle connection that breaks (Postgres restarted, the database dropped, the
  // network cut) is thrown away by the pool and replaced on the next query; without a
  // listener its error would crash the process.
  pool.on("error", () => {});
  // Fail fast with the driver's own message when Postgres is unreachable.
  await pool.query("select 1");
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  const over = (client: pg.Pool | pg.PoolClient | pg.Client): Sql => ({
    exec: async (text) => {
      await client.query(text);
    },
    query: async <T>(text: string, params: unknown[] = [], options?: QueryOptions) =>
      (await (options?.prepared && !pooled ? client.query({ name: statementName(text), text, values: params }) : client.query(text, params))).rows as T[],
  });
  const listener = new Listener(sessionUrl);
  return {
    kind: "postgres",
    prisma,
    ...over(pool),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    exclusive: async (lockKey, fn) => {
      if (pooled) return exclusiveOn(sessionUrl, lockKey, (c) => fn(over(c)));
      const client = await pool.connect();
      try {
        await client.query("SELECT pg_advisory_lock($1)", [lockKey]);
        try {
          return await fn(over(client));
        } finally {
          await client.query("SELECT pg_advisory_unlock($1)", [lockKey]);
        }
      } finally {
        client.release();
      }
    },
    listen: (channel, fn, resumed) => listener.listen(channel, fn, resumed),
    notify: async (channel, payload) => {
      await pool.query("SELECT pg_notify($1, $2)", [channel, payload]);
    },
    close: async () => {
      await prisma.$disconnect();
      // A query still in flight (a write some event started as the server stops) must not hold the shutdown forever.
      await Promise.race([pool.end(), new Promise((r) => setTimeout(r, 5000).unref())]);
    },
  };
}

/** `exclusive` on a direct connection of its own (through a transaction-mode pooler a session-level lock would not hold). */
async function exclusiveOn<T>(url: string, lockKey: number, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on("error", () => {});
  await client.connect();
  try {
    await client.query("SELECT pg_advisory_lock($1)", [lockKey]);
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * LISTEN for every channel of this process on one connection of its own, held
 * for as long as someone listens (an instance's channels share it: Postgres
 * connections grow by one per instance, not one per channel). When that
 * connection breaks (Postgres restarted, the backend terminated) it is opened
 * again with backoff and listens to every channel again; what was sent in
 * between is lost, which is why the listeners are told (`resumed`), and every
 * listener here has a polling or heartbeat fallback.
 */
class Listener {
  private client: pg.Client | null = null;
  private opening: Promise<pg.Client> | null = null;
  /** The channels the current connection listens on. */
  private listened = new Set<string>();
  private readonly channels = new Map<string, Set<(payload: string) => void>>();
  private readonly resumers = new Set<() => void>();
  private retry: NodeJS.Timeout | null = null;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly url: string) {}

  async listen(channel: string, fn: (payload: string) => void, resumed?: () => void): Promise<() => Promise<void>> {
    let set = this.channels.get(channel);
    if (!set) this.channels.set(channel, (set = new Set()));
    set.add(fn);
    if (resumed) this.resumers.add(resumed);
    const stop = async () => {
      set.delete(fn);
      if (resumed) this.resumers.delete(resumed);
      if (set.size > 0 || this.channels.get(channel) !== set) return;
      this.channels.delete(channel);
      if (this.channels.size === 0) return this.close();
      const client = this.client;
      if (client && this.listened.delete(channel)) await (this.queue = this.queue.catch(() => {}).then(() => client.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`))).catch(() => {});
    };
    try {
      const client = this.client ?? (await (this.opening ??= this.open()));
      if (!this.listened.has(channel)) {
        this.listened.add(channel);
        // One statement at a time on the connection (listens made together are queued here, not in the driver).
        await (this.queue = this.queue.catch(() => {}).then(() => client.query(`LISTEN ${pg.escapeIdentifier(channel)}`)));
      }
    } catch (err) {
      await stop();
      throw err;
    }
    return stop;
  }

  private async open(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: this.url });
    c.on("error", () => {});
    c.on("notification", (n) => {
      for (const fn of this.channels.get(n.channel) ?? []) fn(n.payload ?? "");
    });
    c.on("end", () => {
      if (this.client !== c) return;
      this.client = null;
      if (this.channels.size > 0) this.reopen(250);
    });
    try {
      await c.connect();
      const listened = new Set(this.channels.keys());
      // Every channel in one round trip: a connection cut again and again (a failover, a pooler restarting) is listening
      // again as soon as it answers, not after one round trip per channel (each a chance to be cut half-way).
      if (listened.size) await c.query([...listened].map((channel) => `LISTEN ${pg.escapeIdentifier(channel)}`).join("; "));
      this.listened = listened;
      this.client = c;
      return c;
    } catch (err) {
      await c.end().catch(() => {});
      throw err;
    } finally {
      this.opening = null;
    }
  }

  private reopen(delayMs: number): void {
    if (this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      // Nobody listens any more, or a `listen` meanwhile opened it again.
      if (this.channels.size === 0 || this.client) return;
      (this.opening ??= this.open()).then(
        () => {
          for (const resumed of this.resumers) resumed();
        },
        () => this.reopen(Math.min(delayMs * 2, 10_000)),
      );
    }, delayMs);
    this.retry.unref();
  }

  private async close(): Promise<void> {
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    const c = this.client ?? (await this.opening?.catch(() => null)) ?? null;
    this.client = null;
    this.listened = new Set();
    await c?.end().catch(() => {});
  }
}
