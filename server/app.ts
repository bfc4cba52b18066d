import express, { type Express } from "express";
import type { Database } from "./db/open.js";
import type { Clock } from "./clock.js";
import { createExpressEndpoints } from "@ts-rest/express";
import { contract } from "@svc/contract";
import type { Logger } from "./logger.js";
import { ApiError } from "./errors.js";
import { KeyService } from "./keys/keys.js";
import { SessionService } from "./sessions/sessions.js";
import { requestContext } from "./http/request-context.js";
import { jsonBody } from "./http/body.js";
import { urlInput } from "./http/input.js";
import { DatabaseOutage } from "./db/outage.js";
import { authenticate } from "./http/auth.js";
import { idempotency } from "./http/idempotency.js";
import { errorHandler } from "./http/errors.js";
import { routeFallback } from "./http/fallback.js";
import { routes } from "./routes/index.js";
import { openApiJson } from "./openapi.js";
import { docsRouter } from "./docs/docs.js";
import { pagesRouter, PAGE_PATHS } from "./pages/pages.js";
import { dashboardRouter } from "./dashboard/dashboard.js";
import { workerDownloadsRouter, workerUpdateFor } from "./pairing/worker-downloads.js";
import { sdkDownloadsRouter } from "./downloads/sdk-release.js";
import type { Config } from "./config.js";
import type { PublicUrls } from "./public-urls.js";
import { RateLimiter } from "./rate-limit/rate-limiter.js";
import { DeviceFlowService } from "./pairing/device-flow.js";
import { pairingLimitsOf } from "./pairing/limits.js";
import { MachineService } from "./machines/machines.js";
import { WorkerHub } from "./workers/hub.js";
import { randomId } from "./crypto.js";
import { RunStore } from "./runs/store.js";
import type { RunStream } from "./bus/run-stream.js";
import { RunBus } from "./runs/bus.js";
import { WatchedRuns } from "./bus/watched-runs.js";
import { RunEngine } from "./runs/engine.js";
import { RunService } from "./runs/runs.js";
import type { RunEnded } from "./runs/driver.js";
import { RunStreams } from "./runs/streams.js";
import { ChatService } from "./chat/chat.js";
import { ResponsesService } from "./responses/responses.js";
import { WebhookOutbox } from "./webhooks/outbox.js";
import { Webhooks } from "./webhooks/webhooks.js";
import { BillingService } from "./billing/billing.js";
import { StripeWebhookService } from "./billing/stripe-events.js";
import { stripeClients } from "./billing/stripe-client.js";
import { browserCors } from "./http/cors.js";
import { PlanService } from "./ledger/plans.js";
import { UserLedger } from "./users/ledger.js";
import { LedgerReports } from "./ledger/reports.js";
import { StreamSlots } from "./runs/stream-slots.js";
import { UserDirectory } from "./users/directory.js";
import { RunInspector } from "./runs/inspect.js";
import { OwnerService } from "./owners/owners.js";
import { Metrics } from "./metrics/metrics.js";
import { healthRouter, metricsHandler, requestMetrics } from "./http/operations.js";
import { traceRequests } from "./telemetry/http.js";
import { Insights } from "./insights/insights.js";
import { RequestLog } from "./requests/request-log.js";
import { recordRequests } from "./requests/record-requests.js";

export interface Services {
  clock: Clock;
  urls: PublicUrls;
  keys: KeyService;
  sessions: SessionService;
  limiter: RateLimiter;
  deviceFlow: DeviceFlowService;
  machines: MachineService;
  workers: WorkerHub;
  runStore: RunStore;
  runBus: RunBus;
  runEngine: RunEngine;
  runs: RunService;
  /** A run's event stream, opened when it starts and when a reader re-attaches. */
  runStreams: RunStreams;
  chat: ChatService;
  /** `POST /v1/responses` and the stored responses. */
  responses: ResponsesService;
  /** The outbox of outbound webhooks, under `webhooks.facts` (which every service reports through). */
  outbox: WebhookOutbox;
  /** The app's webhook endpoints, the delivery log, the dispatcher and the facts services report. */
  webhooks: Webhooks;
  /** The app's Stripe account, the components' billing reads and checkout. */
  billing: BillingService;
  /** Stripe's signed events: entitlement. */
  stripeWebhooks: StripeWebhookService;
  /** The ledger's side: plans, and users as the app reads them. */
  plans: PlanService;
  users: UserLedger;
  /** The ledger's reports: usage rows, and an environment's summary, CSV export and conversions. */
  reports: LedgerReports;
  /** The app owner's reads: end users listed and shown in full, runs listed and inspected. */
  directory: UserDirectory;
  runInspector: RunInspector;
  /** The app's API requests made with its app keys (the dashboard's request log), and the environment's overview. */
  insights: Insights;
  /** App owners: dashboard accounts, sessions, members, sign-in links and invitations. */
  owners: OwnerService;
  /** Open event streams per app and environment on this instance, bounded (`MAX_STREAMS_PER_APP`). */
  streamSlots: StreamSlots;
  /** The database (health checks, idempotency); routes reach it only through services. */
  db: Database;
  /** The record of a database outage: requests meeting one answer 503, and it is logged once. */
  outage: DatabaseOutage;
  /** This instance's Prometheus metrics (a registry of its own). */
  metrics: Metrics;
  logger: Logger;
}

/**
 * What the routes get: services only. The database and the run's store and bus
 * are the services' own (the compiler keeps a route from reaching them).
 */
export type RouteServices = Omit<Services, "db" | "runStore" | "runBus">;

export interface AppDeps {
  logger: Logger;
  maxBodyBytes: number;
  /** How deep a JSON body may nest (`MAX_BODY_DEPTH`). */
  maxBodyDepth?: number;
  trustProxy: Config["trustProxy"];
  /** `SVC_METRICS_TOKEN`: `/metrics` on this listener takes it; null: no `/metrics` here (404). */
  metricsToken?: string | null;
}

export function createServices(db: Database, clock: Clock, config: Config, urls: PublicUrls, logger: Logger, stream: RunStream | null = null): Services {
  // The database unreachable: logged once per outage, whether a request or a background task (the run engine, the webhook dispatcher) met it.
  const outage = new DatabaseOutage(() => db.query("SELECT 1"), logger);
  const limiter = new RateLimiter(db.prisma, clock);
  const pairing = pairingLimitsOf(config.pairingLimits);
  const outbox = new WebhookOutbox(db, clock);
  // The gauges read the stream slots and the hub, made below, only at scrape time.
  const streamSlots = new StreamSlots(config.maxStreamsPerApp);
  let workers: WorkerHub | null = null;
  const metrics = new Metrics({ db, openStreams: () => streamSlots.total(), machinesOnline: () => workers?.machinesOnline ?? 0 });
  const webhooks = new Webhooks(db, clock, config, outbox, logger, outage, (outcome) => metrics.webhookAttempt(outcome));
  const machines = new MachineService(db.prisma, clock, db, webhooks.facts, config.workerHeartbeatTimeoutSeconds, undefined, logger);
  // Each process is one instance: a machine's row names the instance holding its connection, a run's the one driving it.
  const instance = randomId("inst_", 12);
  const runStore = new RunStore(db, instance, stream);
  workers = new WorkerHub(
    machines,
    db,
    instance,
    logger,
    webhooks.facts,
    config.workerHeartbeatTimeoutSeconds * 1000,
    config.workerLimits,
    (client, version) => workerUpdateFor(urls.base, client, version),
    config.runMachineGraceSeconds,
    (machineId, jobIds) => runStore.liveJobs(machineId, jobIds),
    { sql: db, clock },
  );
  // On the bus, this instance receives a run's live events only while it has a reader of that run; on
  // Postgres alone, a run's steps are announced only once a reader elsewhere marked it (an embedded database is one instance).
  const runBus = new RunBus(stream ?? (db.kind === "postgres" ? new WatchedRuns(db, logger) : null));
  // Runs ended by their driver here (the engine's) and without one (handed back at their start, svc/echo answers: RunService's).
  const ended: RunEnded = (status, kind) => metrics.runEnded(status, kind);
  const runEngine = new RunEngine(runStore, runBus, workers, db, clock, logger, { leaseSeconds: config.runLeaseSeconds, pollMs: config.runPollMs, graceSeconds: config.runMachineGraceSeconds, facts: webhooks.facts, limits: config.runLimits, outage, ended });
  const runs = new RunService(db, clock, runStore, runEngine, config.runLeaseSeconds, webhooks.facts, config.runLimits.queuePerMachine, (how) => metrics.routed(how), ended);
  const plans = new PlanService(db, clock);
  const users = new UserLedger(db, clock, machines, plans, webhooks.facts);
  const keys = new KeyService(db.prisma, clock, db);
  return {
    billing: new BillingService(db, clock, urls, stripeClients(config.stripe), logger, { plans, users }),
    stripeWebhooks: new StripeWebhookService(db, clock, config.stripe.webhookSecret, webhooks.facts, logger),
    db,
    outage,
    streamSlots,
    metrics,
    plans,
    users,
    reports: new LedgerReports(db, clock),
    directory: new UserDirectory(db, clock, users, machines),
    runInspector: new RunInspector(db, runs, machines, runStore),
    insights: new Insights(db, clock, new RequestLog(db, clock, logger, config.requestLogRetentionDays), config.workerHeartbeatTimeoutSeconds),
    clock,
    logger,
    outbox,
    webhooks,
    runStore,
    runBus,
    runEngine,
    runs,
    runStreams: new RunStreams(runs, runStore, runBus, streamSlots, logger),
    chat: new ChatService(db, clock, runs, runStore, runBus, logger),
    responses: new ResponsesService(db, clock, runs, runStore, runBus, logger, config.responsesRetentionDays),
    urls,
    keys,
    sessions: new SessionService(db.prisma, clock),
    owners: new OwnerService(db.prisma, clock, limiter, keys),
    limiter,
    deviceFlow: new DeviceFlowService(db.prisma, clock, limiter, urls, config.devicePollIntervalSeconds, webhooks.facts, pairing.codes, pairing.guesses),
    machines,
    workers,
  };
}

/** The Express app: request context, JSON bodies, the contract's routes with their auth, docs, and the envelope for everything else. */
export function createApp(deps: AppDeps, services: Services): Express {
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  app.set("trust proxy", deps.trustProxy);
  app.use(requestContext(deps.logger));
  app.use(recordRequests(services.insights.requestLog));
  app.use(traceRequests());
  const metricsToken = deps.metricsToken ?? null;
  const operations = ["/healthz", "/readyz", ...(metricsToken ? ["/metrics"] : [])];
  const workerDownloads = workerDownloadsRouter(deps.logger);
  const sdkDownloads = sdkDownloadsRouter(deps.logger);
  app.use(requestMetrics(services.metrics, ["/v1/openapi.json", ...PAGE_PATHS, ...workerDownloads.paths, ...sdkDownloads.paths, ...operations]));
  app.use(urlInput());
  app.use(browserCors(Object.values(contract)));
  app.use(jsonBody(deps.maxBodyBytes, deps.maxBodyDepth));

  const spec = openApiJson();
  app.get("/v1/openapi.json", (_req, res) => res.type("application/json").send(spec));
  app.use("/docs", docsRouter());
  app.use(pagesRouter());
  app.use("/dashboard", dashboardRouter());
  app.use(workerDownloads.router);
  app.use(sdkDownloads.router);
  app.use(healthRouter(services.db));
  app.get("/metrics", metricsHandler(services.metrics, { token: metricsToken }));

  createExpressEndpoints(contract, routes(services), app, {
    globalMiddleware: [authenticate({ keys: services.keys, sessions: services.sessions, ownerSessions: services.owners.sessions, urls: services.urls }), idempotency(services.db, services.clock)],
    responseValidation: false,
    requestValidationErrorHandler: (err, _req, _res, next) => {
      const issue = [err.pathParams, err.headers, err.query, err.body].flatMap((e) => e?.issues ?? [])[0];
      const where = err.pathParams ? "path" : err.headers ? "headers" : err.query ? "query" : "body";
      const param = issue?.path.join(".") || undefined;
      next(
        new ApiError("invalid_request", issue ? `Invalid ${where}${param ? ` field \`${param}\`` : ""}: ${issue.message}.` : `Invalid ${where}.`, { param }),
      );
    },
  });

  app.use(
    routeFallback([
      ...Object.values(contract).map((r) => ({ method: r.method, path: r.path })),
      { method: "GET", path: "/v1/openapi.json" },
      { method: "GET", path: "/docs" },
      ...PAGE_PATHS.map((path) => ({ method: "GET", path })),
      ...[...workerDownloads.paths, ...sdkDownloads.paths].map((path) => ({ method: "GET", path })),
      ...operations.map((path) => ({ method: "GET", path })),
    ]),
  );
  app.use(errorHandler(services.outage));
  return app;
}
