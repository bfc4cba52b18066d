import path from "node:path";
import { z } from "zod";
import { parseTelemetry, type TelemetryConfig } from "./telemetry/config.js";

/**
 * The service's configuration, parsed once at start from the environment.
 * Nothing else reads `process.env`.
 */
const Env = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(4000),
  HOST: z.string().min(1).default("127.0.0.1"),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, "must be a postgres:// or postgresql:// URL")
    .optional(),
  DATABASE_DIRECT_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, "must be a postgres:// or postgresql:// URL")
    .optional(),
  DATABASE_POOL_SIZE: z.coerce.number().int().min(1).max(200).default(10),
  NATS_URL: z
    .string()
    .regex(/^(nats|tls):\/\/[^\s]+$/, "must be a nats:// or tls:// URL (several, comma-separated, for a cluster)")
    .optional(),
  NATS_STREAM: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, _ or - (a JetStream stream name)").default("svc_runs"),
  SVC_DATA_DIR: z.string().min(1).default(".data"),
  PUBLIC_URL: z.string().url().optional(),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  MAX_BODY_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  MAX_BODY_DEPTH: z.coerce.number().int().min(8).max(512).default(64),
  MAX_STREAMS_PER_APP: z.coerce.number().int().min(1).max(1_000_000).default(1000),
  TRUST_PROXY: z
    .string()
    .regex(/^(false|true|loopback|linklocal|uniquelocal|\d+|[0-9a-fA-F.:/, ]+)$/, "must be false, true, a hop count, loopback/linklocal/uniquelocal or addresses (Express `trust proxy`)")
    .default("false"),
  DEVICE_POLL_INTERVAL: z.coerce.number().int().min(1).max(60).default(5),
  RUN_LEASE_SECONDS: z.coerce.number().min(0.5).max(300).default(15),
  RUN_POLL_MS: z.coerce.number().int().min(5).max(600_000).default(10_000),
  RUN_MACHINE_GRACE_SECONDS: z.coerce.number().min(1).max(86400).optional(),
  /** The older name of RUN_MACHINE_GRACE_SECONDS, read when the new one is unset. */
  RUN_ORPHAN_SECONDS: z.coerce.number().min(1).max(86400).optional(),
  WORKER_HEARTBEAT_TIMEOUT_SECONDS: z.coerce.number().int().min(3).max(45).default(45),
  STRIPE_SECRET_KEY: z.string().regex(/^(sk|rk)_(test|live)_\w+$/, "must be a Stripe secret or restricted key (sk_test_..., rk_live_...)").optional(),
  STRIPE_WEBHOOK_SECRET: z.string().regex(/^whsec_\w+$/, "must be a Stripe webhook signing secret (whsec_...)").optional(),
  STRIPE_API_URL: z.string().url().optional(),
  STRIPE_CONNECT_CLIENT_ID: z.string().regex(/^ca_\w+$/, "must be the platform's Connect client id (ca_...)").optional(),
  STRIPE_CONNECT_URL: z.string().url().regex(/^https?:\/\//, "must be an http or https URL").optional(),
  WEBHOOK_RETRY_SCHEDULE: z
    .string()
    .regex(/^\d+(\.\d+)?(,\d+(\.\d+)?)*$/, "must be comma-separated seconds, e.g. 5,300,1800")
    .default("5,300,1800,7200,18000,36000,36000"),
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60000).default(15000),
  WEBHOOK_PRIVATE_ADDRESSES: z.enum(["test", "all", "none"]).default("none"),
  SVC_DEV_APP: z.enum(["0", "1"], { message: "must be 1 (create the development app on an empty database) or 0 (never)" }).optional(),
  RUN_MAX_EVENTS: z.coerce.number().int().min(100).max(10_000_000).default(50_000),
  RUN_MAX_EVENT_BYTES: z.coerce.number().int().min(64 * 1024).max(1024 * 1024 * 1024).default(64 * 1024 * 1024),
  RUN_MAX_PERMISSION_REQUESTS: z.coerce.number().int().min(1).max(1_000_000).default(1000),
  RUN_MAX_TOOL_CALLS: z.coerce.number().int().min(1).max(1_000_000).default(1000),
  RUN_TURN_TIMEOUT_SECONDS: z.coerce.number().min(1).max(86_400).default(600),
  RUN_AGENT_TIMEOUT_SECONDS: z.coerce.number().min(1).max(7 * 86_400).default(3600),
  RUN_DATABASE_OUTAGE_SECONDS: z.coerce.number().min(1).max(3600).default(60),
  RUN_QUEUE_PER_MACHINE: z.coerce.number().int().min(0).max(100_000).default(100),
  RUN_QUEUE_WAIT_SECONDS: z.coerce.number().min(1).max(86_400).default(600),
  RUN_PAUSE_MAX_SECONDS: z.coerce.number().min(1).max(30 * 86_400).default(86_400),
  RESPONSES_RETENTION_DAYS: z.coerce.number().int().min(1).max(3650).default(30),
  REQUEST_LOG_RETENTION_DAYS: z.coerce.number().int().min(0).max(3650).default(14),
  PAIRING_CODES_PER_ADDRESS: z.coerce.number().int().min(1).max(1_000_000).default(1000),
  PAIRING_CODES_PER_CONNECT_KEY: z.coerce.number().int().min(1).max(1_000_000).default(3000),
  PAIRING_GUESSES_PER_SESSION: z.coerce.number().int().min(1).max(1_000).default(10),
  PAIRING_GUESSES_PER_ADDRESS: z.coerce.number().int().min(1).max(1_000_000).default(300),
  PAIRING_GUESSES_PER_APP: z.coerce.number().int().min(1).max(1_000_000).default(1000),
  WORKER_MESSAGES_PER_SECOND: z.coerce.number().int().min(10).max(1_000_000).default(200),
  WORKER_BYTES_PER_SECOND: z.coerce.number().int().min(1024 * 1024).max(1024 * 1024 * 1024).default(8 * 1024 * 1024),
  WORKER_JOB_FRAME_BYTES: z.coerce.number().int().min(1024 * 1024).max(1024 * 1024 * 1024).default(16 * 1024 * 1024),
  SVC_METRICS_TOKEN: z.string().min(16, "must be at least 16 characters (openssl rand -hex 24)").regex(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces").optional(),
  SVC_METRICS_ADDR: z
    .string()
    .regex(/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, "must be host:port, e.g. 127.0.0.1:9464")
    .refine((v) => Number(v.slice(v.lastIndexOf(":") + 1)) <= 65535, "the port must be 0-65535")
    .optional(),
  SVC_SEALING_KEY: z.string().regex(/^[A-Za-z0-9+/]{43}=$/, "must be 32 bytes in base64 (openssl rand -base64 32)").optional(),
});

export interface Config {
  port: number;
  host: string;
  /** `pglite` in a data folder unless DATABASE_URL names a Postgres. */
  database: { kind: "pglite"; dataDir: string } | { kind: "postgres"; url: string; directUrl?: string; poolSize?: number };
  /** The run bus (`NATS_URL`): runs' events on NATS JetStream, in this stream; null: in Postgres (`run_events`). */
  nats: { url: string; stream: string } | null;
  /** The data folder: PGlite's files, the lock, the admin socket. */
  dataDir: string;
  /** Public base URL without the `/v1` (e.g. `https://svc.example.com`). */
  publicUrl: string | null;
  logLevel: z.infer<typeof Env>["LOG_LEVEL"];
  maxBodyBytes: number;
  /** How deep a JSON body may nest objects and arrays (400 beyond). */
  maxBodyDepth: number;
  /** Event streams (runs, re-attaches, streamed chat completions) one app and environment may hold open on this instance at once; past it, 429. */
  maxStreamsPerApp: number;
  /** Express `trust proxy`: which proxies' X-Forwarded-For gives the client address (rate limits per address). */
  trustProxy: boolean | number | string;
  /** RFC 8628 poll interval handed to pairing machines, in seconds. */
  devicePollIntervalSeconds: number;
  /** A run's driving instance renews its lease this often (a third of it); another takes the run over once it lapses. */
  runLeaseSeconds: number;
  /** How often a run's driver looks at its inputs (answers, a cancel) without being woken: the fallback for a lost notification. */
  runPollMs: number;
  /**
   * How long the runs of a machine that vanished (silent past the heartbeat
   * timeout, or its connection closed without a goodbye) wait for it: it
   * reconnects within this (to any instance) and they carry on; past it they
   * fail `worker_lost`. Counted from the moment no instance could drive the run.
   */
  runMachineGraceSeconds: number;
  /** A worker whose connection says nothing for this long is taken for gone (closed 4003, offline); it heartbeats every quarter of it, 10 s at most. */
  workerHeartbeatTimeoutSeconds: number;
  /**
   * Stripe: the platform's secret key, the Connect webhook's signing secret, the API's address (a stand-in in tests),
   * the platform's Connect client id (OAuth) and the Connect host's address (OAuth authorize and token; a stand-in in tests).
   */
  stripe: { secretKey: string | null; webhookSecret: string | null; apiUrl: string | null; connectClientId: string | null; connectUrl: string | null };
  /** Outbound webhooks: seconds to wait before each retry (its length is the number of retries), and each try's timeout. */
  webhooks: { retrySchedule: number[]; timeoutMs: number; privateAddresses: "test" | "all" | "none" };
  /** What one run may take from its machine, and its deadlines (see `RunLimitsConfig`). */
  runLimits: RunLimitsConfig;
  /** How many days a stored response (`POST /v1/responses` with `store`) is kept: `RESPONSES_RETENTION_DAYS`. */
  responsesRetentionDays: number;
  /** How many days the dashboard's request log keeps an app's API requests; 0: none recorded (`REQUEST_LOG_RETENTION_DAYS`). */
  requestLogRetentionDays: number;
  pairingLimits: PairingLimitsConfig;
  /** What one worker connection may send, and the largest job frame sent to it (see `WorkerLimitsConfig`). */
  workerLimits: WorkerLimitsConfig;
  /** Key sealing secrets kept usable at rest (webhook signing secrets); null: a key file in the data folder. */
  sealingKey: Buffer | null;
  /**
   * The development app and its printed key on an empty database: true (`SVC_DEV_APP=1`) on any
   * database, false (`0`) never, null (unset) only on the embedded database, never on Postgres.
   */
  devApp: boolean | null;
  /**
   * `/metrics`: `token` (`SVC_METRICS_TOKEN`) opens it on the public listener to `Authorization: Bearer <token>`
   * (null: 404 there); `listen` (`SVC_METRICS_ADDR`) serves it without a token on a separate listener.
   */
  metrics: { token: string | null; listen: { host: string; port: number } | null };
  /** OpenTelemetry traces (the standard `OTEL_*` variables, see server/telemetry/config.ts): off unless an OTLP endpoint is set. */
  telemetry: TelemetryConfig;
}

/** Per-run limits on what a machine sends, and the deadlines; passing one fails the run (`limit_exceeded`, `turn_timeout`, `run_timeout`). */
export interface RunLimitsConfig {
  /** Events stored for one run (after text deltas are merged). */
  maxEvents: number;
  /** Bytes of job events one run takes from its machine (frames as received). */
  maxEventBytes: number;
  maxPermissionRequests: number;
  /** Tool calls a model's turns may make in one run. */
  maxToolCalls: number;
  /** Default deadline of one model turn (a run's `limits.turnTimeoutMs` overrides it). */
  turnTimeoutMs: number;
  /** Default deadline of an agent CLI's whole run (`limits.runTimeoutMs` overrides it). */
  agentRunTimeoutMs: number;
  /** How long a run's driver keeps a run going while the database is unreachable (its writes held in memory); past it the run fails `database_unavailable`. */
  databaseOutageMs: number;
  /** Runs one machine may hold waiting for a slot (its runtimes at their cap) before a new one goes to the next route or is refused `compute_busy`; 0: no queue. */
  queuePerMachine: number;
  /** How long a run (or its next turn) waits for a slot on its machine; past it the run fails `compute_busy`. */
  queueWaitMs: number;
  /** How long a run stays paused at a limit (the plan's ceiling or allowance, its budget) before it fails `pause_expired`. */
  pauseMaxMs: number;
}

/** Pairing's device codes: per client address an hour, per connect key a minute (the wrong-code limits are fixed: `server/pairing/limits.ts`). */
export interface PairingLimitsConfig {
  codesPerAddressPerHour: number;
  codesPerConnectKeyPerMinute: number;
  /** Wrong user codes in 10 minutes: per browser session, per client address, per app and environment. */
  guessesPerSession: number;
  guessesPerAddress: number;
  guessesPerApp: number;
}

/** Per-connection limits of a worker's WebSocket (token buckets, for the connection and again per job it runs; burst: 5 s of messages, 4 s of bytes); passing one closes it with 4029. */
export interface WorkerLimitsConfig {
  messagesPerSecond: number;
  bytesPerSecond: number;
  /** The largest `job` frame sent to a worker (capped by what the worker says it reads). */
  jobFrameBytes: number;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

export function parseConfig(env: Record<string, string | undefined>): Config {
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ""));
  const parsed = Env.safeParse(cleaned);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message} (got ${JSON.stringify(cleaned[String(i.path[0])])})`));
  }
  const e = parsed.data;
  const otelProblems: string[] = [];
  const telemetry = parseTelemetry(cleaned, otelProblems);
  if (otelProblems.length) throw new ConfigError(otelProblems);
  if (e.DATABASE_DIRECT_URL && !e.DATABASE_URL) {
    throw new ConfigError(["DATABASE_DIRECT_URL: a direct connection is for a DATABASE_URL that goes through a pooler (PgBouncer in transaction mode); set DATABASE_URL too, or leave DATABASE_DIRECT_URL out"]);
  }
  if (e.NATS_URL && !e.DATABASE_URL) {
    throw new ConfigError(["NATS_URL: the run bus is for several instances sharing one Postgres; set DATABASE_URL too, or leave NATS_URL out (the embedded database keeps run events itself)"]);
  }
  const dataDir = path.resolve(e.SVC_DATA_DIR);
  return {
    port: e.PORT,
    host: e.HOST,
    database: e.DATABASE_URL
      ? { kind: "postgres", url: e.DATABASE_URL, poolSize: e.DATABASE_POOL_SIZE, ...(e.DATABASE_DIRECT_URL ? { directUrl: e.DATABASE_DIRECT_URL } : {}) }
      : { kind: "pglite", dataDir: path.join(dataDir, "pglite") },
    nats: e.NATS_URL ? { url: e.NATS_URL, stream: e.NATS_STREAM } : null,
    dataDir,
    publicUrl: e.PUBLIC_URL ? e.PUBLIC_URL.replace(/\/+$/, "") : null,
    logLevel: e.LOG_LEVEL,
    maxBodyBytes: e.MAX_BODY_BYTES,
    maxBodyDepth: e.MAX_BODY_DEPTH,
    maxStreamsPerApp: e.MAX_STREAMS_PER_APP,
    trustProxy: e.TRUST_PROXY === "false" ? false : e.TRUST_PROXY === "true" ? true : /^\d+$/.test(e.TRUST_PROXY) ? Number(e.TRUST_PROXY) : e.TRUST_PROXY,
    devicePollIntervalSeconds: e.DEVICE_POLL_INTERVAL,
    runLeaseSeconds: e.RUN_LEASE_SECONDS,
    runPollMs: e.RUN_POLL_MS,
    runMachineGraceSeconds: e.RUN_MACHINE_GRACE_SECONDS ?? e.RUN_ORPHAN_SECONDS ?? 300,
    workerHeartbeatTimeoutSeconds: e.WORKER_HEARTBEAT_TIMEOUT_SECONDS,
    stripe: {
      secretKey: e.STRIPE_SECRET_KEY ?? null,
      webhookSecret: e.STRIPE_WEBHOOK_SECRET ?? null,
      apiUrl: e.STRIPE_API_URL ?? null,
      connectClientId: e.STRIPE_CONNECT_CLIENT_ID ?? null,
      connectUrl: e.STRIPE_CONNECT_URL ? e.STRIPE_CONNECT_URL.replace(/\/+$/, "") : null,
    },
    webhooks: { retrySchedule: e.WEBHOOK_RETRY_SCHEDULE.split(",").map(Number), timeoutMs: e.WEBHOOK_TIMEOUT_MS, privateAddresses: e.WEBHOOK_PRIVATE_ADDRESSES },
    runLimits: {
      maxEvents: e.RUN_MAX_EVENTS,
      maxEventBytes: e.RUN_MAX_EVENT_BYTES,
      maxPermissionRequests: e.RUN_MAX_PERMISSION_REQUESTS,
      maxToolCalls: e.RUN_MAX_TOOL_CALLS,
      turnTimeoutMs: e.RUN_TURN_TIMEOUT_SECONDS * 1000,
      agentRunTimeoutMs: e.RUN_AGENT_TIMEOUT_SECONDS * 1000,
      databaseOutageMs: e.RUN_DATABASE_OUTAGE_SECONDS * 1000,
      queuePerMachine: e.RUN_QUEUE_PER_MACHINE,
      queueWaitMs: e.RUN_QUEUE_WAIT_SECONDS * 1000,
      pauseMaxMs: e.RUN_PAUSE_MAX_SECONDS * 1000,
    },
    responsesRetentionDays: e.RESPONSES_RETENTION_DAYS,
    requestLogRetentionDays: e.REQUEST_LOG_RETENTION_DAYS,
    pairingLimits: {
      codesPerAddressPerHour: e.PAIRING_CODES_PER_ADDRESS,
      codesPerConnectKeyPerMinute: e.PAIRING_CODES_PER_CONNECT_KEY,
      guessesPerSession: e.PAIRING_GUESSES_PER_SESSION,
      guessesPerAddress: e.PAIRING_GUESSES_PER_ADDRESS,
      guessesPerApp: e.PAIRING_GUESSES_PER_APP,
    },
    workerLimits: { messagesPerSecond: e.WORKER_MESSAGES_PER_SECOND, bytesPerSecond: e.WORKER_BYTES_PER_SECOND, jobFrameBytes: e.WORKER_JOB_FRAME_BYTES },
    sealingKey: e.SVC_SEALING_KEY ? Buffer.from(e.SVC_SEALING_KEY, "base64") : null,
    devApp: e.SVC_DEV_APP === undefined ? null : e.SVC_DEV_APP === "1",
    metrics: { token: e.SVC_METRICS_TOKEN ?? null, listen: e.SVC_METRICS_ADDR ? hostPort(e.SVC_METRICS_ADDR) : null },
    telemetry,
  };
}

function hostPort(addr: string): { host: string; port: number } {
  const cut = addr.lastIndexOf(":");
  return { host: addr.slice(0, cut).replace(/^\[(.*)\]$/, "$1"), port: Number(addr.slice(cut + 1)) };
}

/** The base URL clients use, once the port is known. */
export function baseUrlOf(config: Config, boundPort: number): string {
  if (config.publicUrl) return config.publicUrl;
  const host = config.host === "0.0.0.0" || config.host === "::" ? "localhost" : config.host;
  return `http://${host.includes(":") ? `[${host}]` : host}:${boundPort}`;
}
