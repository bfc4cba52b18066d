import type { AddressInfo } from "node:net";
import http, { type Server } from "node:http";
import type { Config } from "./config.js";
import { PublicUrls } from "./public-urls.js";
import { systemClock, type Clock } from "./clock.js";
import type { Logger } from "./logger.js";
import { openDatabase, type Database, type DatabaseTarget } from "./db/open.js";
import { EmbeddedUpkeep } from "./db/upkeep.js";
import { migrate } from "./db/migrate.js";
import { createApp, createServices, type Services } from "./app.js";
import { bootstrapDevApp, devAppBanner } from "./keys/bootstrap.js";
import { adminSocketPath, lockDataDir } from "./data-dir-lock.js";
import { startAdminSocket } from "./admin/socket.js";
import { signInLinkUrl } from "./admin/operations.js";
import express from "express";
import { requestContext } from "./http/request-context.js";
import { metricsHandler } from "./http/operations.js";
import { routeFallback } from "./http/fallback.js";
import { errorHandler } from "./http/errors.js";
import { answerClientError, answerConnect, answerExpectation, edgeGuard } from "./http/client-error.js";
import { startTracing } from "./telemetry/tracing.js";
import { RunStream } from "./bus/run-stream.js";

export interface StartOptions {
  config: Config;
  logger: Logger;
  clock?: Clock;
  /** Overrides the configured database (tests: in-memory PGlite, a scratch Postgres). */
  database?: DatabaseTarget;
  /** Where the one-time dev-app banner goes (never the log). */
  print?: (text: string) => void;
  /**
   * Called when the instance can no longer run safely (the data folder's lock was
   * lost: another process may open the embedded database). `main.ts` stops the
   * process (a supervisor restarts it); by default it is only logged.
   */
  onFatal?: (reason: string, err: Error) => void;
}

export interface RunningServer {
  url: string;
  /** The separate metrics listener's `/metrics` URL (`SVC_METRICS_ADDR`), or null. */
  metricsUrl: string | null;
  db: Database;
  services: Services;
  /** The HTTP listener (the tests watch what it answers: test/helpers/openapi-check.ts). */
  http: Server;
  close(): Promise<void>;
}

/**
 * Starts the service: takes the data folder (embedded database), applies the
 * migrations, creates the dev app on an empty database, then listens. Undoes
 * what it did if a step fails.
 */
export async function startServer(opts: StartOptions): Promise<RunningServer> {
  const { config, logger } = opts;
  const clock = opts.clock ?? systemClock;
  const target: DatabaseTarget = opts.database ?? config.database;
  const cleanup: (() => Promise<void>)[] = [];
  const close = async () => {
    for (const fn of cleanup.reverse()) await fn().catch((err) => logger.error({ err }, "shutdown step failed"));
  };
  try {
    // First started, last closed: the spans of everything below are flushed once the rest has stopped.
    cleanup.push(await startTracing(config.telemetry, logger));
    const ownsDataDir = target.kind === "pglite" && target.dataDir !== null;
    if (ownsDataDir) {
      cleanup.push(
        await lockDataDir(config.dataDir, (err) => {
          logger.error({ err }, "lost the data folder lock");
          opts.onFatal?.("lost the data folder lock", err);
        }),
      );
    }
    const db = await openDatabase(target);
    cleanup.push(() => db.close());
    const applied = await migrate(db);
    if (applied.length) logger.info({ applied }, "migrations applied");
    if (db.kind === "pglite") {
      // Postgres's autovacuum, for the embedded database that has none: its tables' statistics and dead rows.
      const upkeep = new EmbeddedUpkeep(db, logger);
      upkeep.start();
      cleanup.push(() => upkeep.stop());
    }

    const urls = new PublicUrls(config);
    // The run bus (NATS_URL): connected before anything drives a run; a lost link after start is an outage (runs wait, readers retry).
    let onBusReconnect = () => {};
    const stream = config.nats ? await RunStream.open({ ...config.nats, instance: `pid ${process.pid}`, logger }, () => onBusReconnect()) : null;
    if (stream) cleanup.push(() => stream.close());
    const services = createServices(db, clock, config, urls, logger, stream);
    onBusReconnect = () => services.runEngine.linkBack();
    // Last before the database closes: webhook facts still being recorded (machines going offline at shutdown).
    cleanup.push(() => services.webhooks.facts.drain());
    // Closed once the listener has: the requests answered until then are written.
    cleanup.push(() => services.insights.requestLog.stop());
    cleanup.push(async () => services.outage.close());
    cleanup.push(await services.keys.listen());
    const app = createApp({ logger, maxBodyBytes: config.maxBodyBytes, maxBodyDepth: config.maxBodyDepth, trustProxy: config.trustProxy, metricsToken: config.metrics.token }, services);
    // A missing Host is answered by the edge guard (in the envelope), not by Node (an empty 400).
    const server: Server = http.createServer({ requireHostHeader: false }, edgeGuard(app, logger));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(config.port, config.host, () => resolve());
    });
    // What Node's HTTP parser refuses is answered in the envelope, not as a bare 400; so are Expect and CONNECT.
    server.on("clientError", answerClientError(logger));
    server.on("checkExpectation", answerExpectation(logger));
    server.on("connect", answerConnect(logger));
    cleanup.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    );
    urls.bind((server.address() as AddressInfo).port);
    await services.workers.attach(server);
    cleanup.push(() => services.workers.close());
    await services.runEngine.start();
    cleanup.push(() => services.runEngine.close());
    await services.webhooks.start();
    cleanup.push(() => services.webhooks.close());
    const url = urls.base;
    let metricsUrl: string | null = null;
    if (config.metrics.listen) {
      const { host, port } = config.metrics.listen;
      const metricsServer = await listenMetrics(services, logger, host, port);
      cleanup.push(() => new Promise<void>((resolve) => metricsServer.close(() => resolve())));
      const bound = (metricsServer.address() as AddressInfo).port;
      metricsUrl = `http://${host.includes(":") ? `[${host}]` : host}:${bound}/metrics`;
      logger.info({ url: metricsUrl }, "metrics listening");
    }

    if (ownsDataDir) cleanup.push(await startAdminSocket(adminSocketPath(config.dataDir), { keys: services.keys, owners: services.owners, baseUrl: url }, logger));
    // Last, once nothing else can fail: the dev app's key is shown only now, and
    // only its hash is stored, so a start that failed earlier must not have made it.
    const created = await bootstrapDevApp(db, services.keys, config.devApp);
    if (created) {
      // The key is shown now or never: a sign-in link that cannot be made (`svc dashboard` makes one later) does not hold the banner back.
      const link = await services.owners.operatorSignInLink().catch((err) => void logger.error({ err }, "could not make the dashboard's sign-in link"));
      (opts.print ?? ((t) => process.stdout.write(t)))(devAppBanner(created, url, link ? signInLinkUrl(url, link.token) : undefined));
    }
    logger.info({ url, database: db.kind, runBus: stream ? "nats" : "database" }, "listening");
    return { url, metricsUrl, db, services, http: server, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * The metrics listener (`SVC_METRICS_ADDR`): `/metrics` without a token, for a scraper on
 * a private interface; everything else 404 in the envelope. Not counted in the request metrics.
 */
async function listenMetrics(services: Services, logger: Logger, host: string, port: number): Promise<Server> {
  const app = express();
  app.disable("x-powered-by");
  app.use(requestContext(logger));
  app.get("/metrics", metricsHandler(services.metrics, { open: true }));
  app.use(routeFallback([{ method: "GET", path: "/metrics" }]));
  app.use(errorHandler());
  const server = http.createServer(app);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
