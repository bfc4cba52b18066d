import { ConfigError, parseConfig } from "./config.js";
import { createLogger } from "./logger.js";
import { startServer } from "./server.js";
import { DataDirLockedError } from "./data-dir-lock.js";

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
const starting = startServer({ config, logger });
let stopping = false;
const stop = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, "stopping");
  const server = await starting.catch(() => null);
  await server?.close();
  process.exit(0);
};
process.on("SIGINT", () => void stop("SIGINT"));
process.on("SIGTERM", () => void stop("SIGTERM"));

try {
  await starting;
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
