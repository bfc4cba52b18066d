import type { Logger } from "../logger.js";
import { requestScope } from "../request-scope.js";

/** Called by the database layer as a statement leaves for the server: counted for the request it runs in. */
export function statementSent(): void {
  const s = requestScope.getStore();
  if (s) s.statements++;
}

/**
 * Has the request running here sent nothing to the database yet? A request that
 * failed without sending any (its connections refused) created and changed nothing,
 * whatever its route: its 503 says so (`Service-Nothing-Created: true`), and a
 * client may retry even a run start.
 */
export function nothingSent(): boolean {
  return (requestScope.getStore()?.statements ?? 0) === 0;
}

/**
 * Is this error the database being unreachable (an outage), rather than a
 * failure of this request? One classifier for every layer that meets the
 * database: node-postgres (socket errors, a backend terminated, a server
 * starting up or shutting down), Prisma's pg adapter (`DriverAdapterError`
 * carrying the driver's error, or Prisma's own `P1001`-style codes wrapping it).
 *
 * An outage is answered `503` with `Retry-After`; anything else stays a 500.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  // The error and what it wraps (`cause`, Prisma's `meta.driverAdapterError`, an AggregateError's `errors`), iteratively and bounded.
  const queue: unknown[] = [err];
  const seen = new Set<unknown>();
  for (let i = 0; i < queue.length && i < 32; i++) {
    const e = queue[i];
    if (e === null || typeof e !== "object" || seen.has(e)) continue;
    seen.add(e);
    if (matches(e as Record<string, unknown>)) return true;
    const o = e as { cause?: unknown; meta?: { driverAdapterError?: unknown }; errors?: unknown };
    queue.push(o.cause, o.meta?.driverAdapterError);
    if (Array.isArray(o.errors)) queue.push(...o.errors.slice(0, 8));
  }
  return false;
}

/** Socket-level failures reaching the database. */
const SOCKET_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ECONNABORTED"]);
/** SQLSTATEs of a server going away or not taking connections: class 08 (connection exception) is matched by prefix. */
const SQLSTATES = new Set([
  "57P01", // admin_shutdown: the backend was terminated (pg_ctl stop, a failover)
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: starting up, shutting down, in recovery
  "53300", // too_many_connections
]);
/** Prisma's codes for the same (P1001 can't reach, P1002 timed out reaching, P1008 socket timeout, P1017 connection closed, P2024 pool timeout, P2037 too many connections). */
const PRISMA_CODES = new Set(["P1001", "P1002", "P1008", "P1017", "P2024", "P2037"]);
/** Prisma driver adapters' error kinds. */
const ADAPTER_KINDS = new Set(["DatabaseNotReachable", "ConnectionClosed", "SocketTimeout", "TooManyConnections"]);
/** node-postgres and pg-pool say these in words only. */
const MESSAGES =
  /Connection terminated|Client has encountered a connection error|Client was closed and is not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Connection terminated due to connection timeout|the database system is (starting up|shutting down|in recovery mode|not yet accepting connections)|terminating connection due to administrator command|server closed the connection unexpectedly|Can't reach database server/i;

function matches(e: Record<string, unknown>): boolean {
  for (const key of ["code", "originalCode"]) {
    const code = e[key];
    if (typeof code !== "string") continue;
    if (SOCKET_CODES.has(code) || SQLSTATES.has(code) || PRISMA_CODES.has(code) || /^08[0-9A-Z]{3}$/.test(code)) return true;
  }
  if (typeof e.kind === "string" && ADAPTER_KINDS.has(e.kind)) return true;
  if (e.kind === "postgres" && typeof e.code === "string" && (SQLSTATES.has(e.code) || e.code.startsWith("08"))) return true;
  return typeof e.message === "string" && MESSAGES.test(e.message);
}

/** Seconds a client is told to wait (`Retry-After`) while the database is unreachable. */
export const OUTAGE_RETRY_AFTER_SECONDS = 2;

/**
 * Keeps one record of a database outage for the log: a `warn` line when the
 * first request meets it, then a probe every second until the database answers
 * again, which logs one `info` line with how long it lasted and how many requests
 * were answered 503 meanwhile. Requests never log it themselves.
 */
export class DatabaseOutage {
  private since: number | null = null;
  private refused = 0;
  private probe: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly ping: () => Promise<unknown>,
    private readonly log: Logger,
    private readonly probeMs = 1000,
  ) {}

  /** True while an outage is known (from its first refused request until a probe gets through). */
  get active(): boolean {
    return this.since !== null;
  }

  /** A request (or a background task) met the database unreachable. */
  report(err: unknown, requestId?: string): void {
    this.refused++;
    if (this.since !== null || this.stopped) return;
    this.since = Date.now();
    const e = err as { code?: unknown; message?: unknown };
    this.log.warn({ requestId, code: typeof e?.code === "string" ? e.code : undefined, reason: String(e?.message ?? err).slice(0, 200) }, "database unreachable: answering 503 until it is back");
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.probe = setTimeout(() => {
      this.probe = null;
      this.ping().then(
        () => this.recovered(),
        () => this.schedule(),
      );
    }, this.probeMs);
    this.probe.unref();
  }

  private recovered(): void {
    if (this.since === null) return;
    this.log.info({ outageMs: Date.now() - this.since, refused: this.refused }, "database reachable again");
    this.since = null;
    this.refused = 0;
  }

  close(): void {
    this.stopped = true;
    if (this.probe) clearTimeout(this.probe);
    this.probe = null;
  }
}
