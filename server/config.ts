import path from "node:path";
import { z } from "zod";

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
  SVC_DATA_DIR: z.string().min(1).default(".data"),
  PUBLIC_URL: z.string().url().optional(),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  MAX_BODY_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  MAX_BODY_DEPTH: z.coerce.number().int().min(8).max(512).default(64),
  TRUST_PROXY: z
    .string()
    .regex(/^(false|true|loopback|linklocal|uniquelocal|\d+|[0-9a-fA-F.:/, ]+)$/, "must be false, true, a hop count, loopback/linklocal/uniquelocal or addresses (Express `trust proxy`)")
    .default("false"),
  DEVICE_POLL_INTERVAL: z.coerce.number().int().min(1).max(60).default(5),
  RUN_LEASE_SECONDS: z.coerce.number().min(0.5).max(300).default(15),
  RUN_ORPHAN_SECONDS: z.coerce.number().min(1).max(3600).default(45),
  STRIPE_SECRET_KEY: z.string().regex(/^(sk|rk)_(test|live)_\w+$/, "must be a Stripe secret or restricted key (sk_test_..., rk_live_...)").optional(),
  STRIPE_WEBHOOK_SECRET: z.string().regex(/^whsec_\w+$/, "must be a Stripe webhook signing secret (whsec_...)").optional(),
  STRIPE_API_URL: z.string().url().optional(),
  WEBHOOK_RETRY_SCHEDULE: z
    .string()
    .regex(/^\d+(\.\d+)?(,\d+(\.\d+)?)*$/, "must be comma-separated seconds, e.g. 5,300,1800")
    .default("5,300,1800,7200,18000,36000,36000"),
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60000).default(15000),
  WEBHOOK_PRIVATE_ADDRESSES: z.enum(["test", "all", "none"]).default("test"),
  SVC_SEALING_KEY: z.string().regex(/^[A-Za-z0-9+/]{43}=$/, "must be 32 bytes in base64 (openssl rand -base64 32)").optional(),
});

export interface Config {
  port: number;
  host: string;
  /** `pglite` in a data folder unless DATABASE_URL names a Postgres. */
  database: { kind: "pglite"; dataDir: string } | { kind: "postgres"; url: string };
  /** The data folder: PGlite's files, the lock, the admin socket. */
  dataDir: string;
  /** Public base URL without the `/v1` (e.g. `https://svc.example.com`). */
  publicUrl: string | null;
  logLevel: z.infer<typeof Env>["LOG_LEVEL"];
  maxBodyBytes: number;
  /** How deep a JSON body may nest objects and arrays (400 beyond). */
  maxBodyDepth: number;
  /** Express `trust proxy`: which proxies' X-Forwarded-For gives the client address (rate limits per address). */
  trustProxy: boolean | number | string;
  /** RFC 8628 poll interval handed to pairing machines, in seconds. */
  devicePollIntervalSeconds: number;
  /** A run's driving instance renews its lease this often (a third of it); another takes the run over once it lapses. */
  runLeaseSeconds: number;
  /** A run nobody can drive (its machine connected nowhere) for this long after its lease lapsed fails with `worker_lost`. */
  runOrphanSeconds: number;
  /** Stripe: the platform's secret key, the Connect webhook's signing secret, and the API's address (a stand-in in tests). */
  stripe: { secretKey: string | null; webhookSecret: string | null; apiUrl: string | null };
  /** Outbound webhooks: seconds to wait before each retry (its length is the number of retries), and each try's timeout. */
  webhooks: { retrySchedule: number[]; timeoutMs: number; privateAddresses: "test" | "all" | "none" };
  /** Key sealing secrets kept usable at rest (webhook signing secrets); null: a key file in the data folder. */
  sealingKey: Buffer | null;
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
  const dataDir = path.resolve(e.SVC_DATA_DIR);
  return {
    port: e.PORT,
    host: e.HOST,
    database: e.DATABASE_URL ? { kind: "postgres", url: e.DATABASE_URL } : { kind: "pglite", dataDir: path.join(dataDir, "pglite") },
    dataDir,
    publicUrl: e.PUBLIC_URL ? e.PUBLIC_URL.replace(/\/+$/, "") : null,
    logLevel: e.LOG_LEVEL,
    maxBodyBytes: e.MAX_BODY_BYTES,
    maxBodyDepth: e.MAX_BODY_DEPTH,
    trustProxy: e.TRUST_PROXY === "false" ? false : e.TRUST_PROXY === "true" ? true : /^\d+$/.test(e.TRUST_PROXY) ? Number(e.TRUST_PROXY) : e.TRUST_PROXY,
    devicePollIntervalSeconds: e.DEVICE_POLL_INTERVAL,
    runLeaseSeconds: e.RUN_LEASE_SECONDS,
    runOrphanSeconds: e.RUN_ORPHAN_SECONDS,
    stripe: { secretKey: e.STRIPE_SECRET_KEY ?? null, webhookSecret: e.STRIPE_WEBHOOK_SECRET ?? null, apiUrl: e.STRIPE_API_URL ?? null },
    webhooks: { retrySchedule: e.WEBHOOK_RETRY_SCHEDULE.split(",").map(Number), timeoutMs: e.WEBHOOK_TIMEOUT_MS, privateAddresses: e.WEBHOOK_PRIVATE_ADDRESSES },
    sealingKey: e.SVC_SEALING_KEY ? Buffer.from(e.SVC_SEALING_KEY, "base64") : null,
  };
}

/** The base URL clients use, once the port is known. */
export function baseUrlOf(config: Config, boundPort: number): string {
  if (config.publicUrl) return config.publicUrl;
  const host = config.host === "0.0.0.0" || config.host === "::" ? "localhost" : config.host;
  return `http://${host.includes(":") ? `[${host}]` : host}:${boundPort}`;
}
