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
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const result = (super.query as any)(...args);
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
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return typeof cb === "function" ? (super.connect as any)(AsyncResource.bind(cb)) : super.connect();
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

export type DatabaseTarget = { kind: "pglite"; dataDir: string | null } | { kind: "postgres"; url: string };

export async function openDatabase(target: DatabaseTarget): Promise<Database> {
  return target.kind === "pglite" ? openPGlite(target.dataDir) : openPostgres(target.url);
}

/** `dataDir: null` is an in-memory database (tests). */
async function openPGlite(dataDir: string | null): Promise<Database> {
  if (dataDir) fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const db = dataDir ? new PGlite(dataDir) : new PGlite();
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

async function openPostgres(url: string): Promise<Database> {
  // A database that does not answer (a partition, not a refusal) fails a request after 10 s (503) instead of holding it.
  const pool = new ScopedPool({ connectionString: url, max: 10, connectionTimeoutMillis: 10_000, Client: CountingClient });
  // An idle connection that breaks (Postgres restarted, the database dropped, the
  // network cut) is thrown away by the pool and replaced on the next query; without a
  // listener its error would crash the process.
  pool.on("error", () => {});
  // Fail fast with the driver's own message when Postgres is unreachable.
  await pool.query("select 1");
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  const over = (client: pg.Pool | pg.PoolClient): Sql => ({
    exec: async (text) => {
      await client.query(text);
    },
    query: async <T>(text: string, params: unknown[] = [], options?: QueryOptions) =>
      (await (options?.prepared ? client.query({ name: statementName(text), text, values: params }) : client.query(text, params))).rows as T[],
  });
  return {
    kind: "postgres",
    prisma,
    ...over(pool),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    exclusive: async (lockKey, fn) => {
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
    listen: (channel, fn, resumed) => listenOn(url, channel, fn, resumed),
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

/**
 * LISTEN on a connection of its own, held for as long as someone listens. When
 * that connection breaks (Postgres restarted, the backend terminated) it is
 * opened again with backoff; what was sent in between is lost, which is why
 * the listener is told (`resumed`), and every listener here has a polling or
 * heartbeat fallback.
 */
async function listenOn(url: string, channel: string, fn: (payload: string) => void, resumed?: () => void): Promise<() => Promise<void>> {
  let stopped = false;
  let client: pg.Client | null = null;
  let retry: NodeJS.Timeout | null = null;
  const open = async () => {
    const c = new pg.Client({ connectionString: url });
    c.on("error", () => {});
    c.on("notification", (n) => {
      if (n.channel === channel) fn(n.payload ?? "");
    });
    c.on("end", () => {
      if (!stopped && client === c) reopen(250);
    });
    client = c;
    await c.connect();
    await c.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
  };
  const reopen = (delayMs: number) => {
    client = null;
    if (retry) return;
    retry = setTimeout(() => {
      retry = null;
      open().then(
        () => resumed?.(),
        () => !stopped && reopen(Math.min(delayMs * 2, 10_000)),
      );
    }, delayMs);
    retry.unref();
  };
  await open();
  return async () => {
    stopped = true;
    if (retry) clearTimeout(retry);
    await client?.end().catch(() => {});
  };
}
