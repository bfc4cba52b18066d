import { ConfigError, parseConfig } from "./config.js";
import { createLogger } from "./logger.js";
import { startServer } from "./server.js";
import { DataDirLockedError } from "./data-dir-lock.js";
import { handleEscaped } from "./http/escaped.js";

// The entry point: the only place that reads process.env.
let config;
try {
  config = parseConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  throw err;
}
const logger = createLogger(config.logLevel);

// Signals during the start wait for it, then stop cleanly (the data folder's lock released).
// A fatal condition stops the same way with exit code 1, for the supervisor to restart the process.
const starting = startServer({ config, logger, onFatal: (reason) => void stop(reason, 1) });
let stopping = false;
let running: Awaited<typeof starting> | null = null;
const stop = async (signal: string, code = 0) => {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, "stopping");
  // A shutdown that hangs (a stuck connection) must not keep a broken process alive.
  setTimeout(() => process.exit(code || 1), 15_000).unref();
  const server = await starting.catch(() => null);
  await server?.close();
  process.exit(code);
};
process.on("SIGINT", () => void stop("SIGINT"));
process.on("SIGTERM", () => void stop("SIGTERM"));

// What escaped every handler. In a request's work (or the database being unreachable) it is
// answered and logged, and the process carries on: one request never stops every tenant.
// A rejection elsewhere is logged and carries on too (no stack was unwound). An exception
// thrown outside any request leaves the process in a state nobody planned for: it stops
// (exit 1) and the supervisor starts it again.
process.on("unhandledRejection", (reason) => {
  const what = handleEscaped(reason, logger, running?.services.outage ?? null);
  if (what === "other") logger.error({ err: reason }, "unhandled rejection");
});
process.on("uncaughtException", (err) => {
  const what = handleEscaped(err, logger, running?.services.outage ?? null);
  if (what !== "other") return;
  logger.fatal({ err }, "uncaught exception outside any request: stopping");
  void stop("uncaughtException", 1);
});

try {
  running = await starting;
} catch (err) {
  if (err instanceof DataDirLockedError) {
    process.stderr.write(`${err.message}\nStop the other process, or set SVC_DATA_DIR to another folder.\n`);
    process.exit(1);
  }
  if ((err as NodeJS.ErrnoException).code === "EADDRINUSE") {
    process.stderr.write(`Port ${config.port} on ${config.host} is already in use (EADDRINUSE): stop what holds it, or set PORT.\n`);
    process.exit(1);
  }
  logger.fatal({ err }, "could not start");
  process.exit(1);
}
