import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Database } from "../db/open.js";
import { ACTIVE_STATUSES_SQL } from "../runs/run-rows.js";

/** What the scrape-time gauges read: this instance's live state, and the shared database. */
export interface MetricSources {
  db: Pick<Database, "query" | "poolStats" | "kind">;
  /** Open event streams (SSE) on this instance. */
  openStreams: () => number;
  /** Worker connections that said hello on this instance. */
  machinesOnline: () => number;
}

export type WebhookOutcome = "delivered" | "retrying" | "failed";

/**
 * The active runs by status and route kind: counted at each scrape through the index that holds active runs only
 * (`runs_status_lease_expires_at_idx`, partial). Runs that ended are counted as they end (`svc_runs_finished_total`),
 * not at the scrape: counting them read every run ever made at every scrape of every instance.
 */
export const ACTIVE_RUNS_COUNT_SQL = `SELECT status::text AS status, coalesce(route_kind, 'none') AS route_kind, count(*)::int AS n FROM runs WHERE status IN (${ACTIVE_STATUSES_SQL}) GROUP BY 1, 2`;

/** How a run's route was chosen: in memory from the machines held here, from the rows, or again from the rows after the start's statement refused the first choice. */
export type RoutedBy = "memory" | "rows" | "rerouted";

/**
 * One server instance's metrics, in a registry of its own (never prom-client's global one:
 * tests run several servers in one process, and each must report only itself).
 * Counters of what passes through this instance (requests, webhook attempts) are kept
 * here; what lives in the database (runs, ledger rows) is read from it at scrape time.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"method" | "route" | "status">;
  private readonly latency: Histogram<"method" | "route" | "status">;
  private readonly webhooks: Counter<"outcome">;
  private readonly routes: Counter<"how">;
  private readonly finished: Counter<"status" | "route_kind">;

  constructor(sources: MetricSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({ name: "svc_http_requests_total", help: "HTTP requests answered, by method, route pattern (never raw ids) and status.", labelNames: ["method", "route", "status"], registers });
    this.latency = new Histogram({
      name: "svc_http_request_duration_seconds",
      help: "Time from a request's arrival to its answer's end (a stream's whole life), by method, route pattern and status.",
      labelNames: ["method", "route", "status"],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
      registers,
    });
    this.webhooks = new Counter({ name: "svc_webhook_deliveries_total", help: "Outbound webhook attempts sent by this instance, by outcome (delivered; retrying: failed, another try scheduled; failed: failed for good).", labelNames: ["outcome"], registers });
    for (const outcome of ["delivered", "retrying", "failed"]) this.webhooks.inc({ outcome }, 0);
    this.routes = new Counter({
      name: "svc_run_routes_total",
      help: "Runs started on this instance, by how their route was chosen: memory (from the machines held here, checked in the start's one statement; or the app route asked first), rows (read from the database: no machine of the user's here), rerouted (the start's statement found a machine held elsewhere, removed, or its slots changed: chosen again from the rows).",
      labelNames: ["how"],
      registers,
    });
    for (const how of ["memory", "rows", "rerouted"]) this.routes.inc({ how }, 0);
    this.finished = new Counter({
      name: "svc_runs_finished_total",
      help: "Runs that ended on this instance, by status (completed, failed, cancelled: ended by their driver here; handed_back: handed to the app at their start here; a svc/echo answer: completed) and route kind (none: not routed, as a svc/echo answer). Sum over instances for the deployment's.",
      labelNames: ["status", "route_kind"],
      registers,
    });

    new Gauge({ name: "svc_open_streams", help: "Event streams (SSE: runs, re-attaches, streamed chat completions) open on this instance.", registers, collect() { this.set(sources.openStreams()); } });
    new Gauge({ name: "svc_machines_online", help: "Machines whose worker connection (hello said) is held by this instance.", registers, collect() { this.set(sources.machinesOnline()); } });
    new Gauge({
      name: "svc_runs",
      help: "Active runs in the database (all instances: queued, running, waiting, paused), by status and route kind (none: not routed), counted at scrape time. Ended runs: svc_runs_finished_total.",
      labelNames: ["status", "route_kind"],
      registers,
      async collect() {
        const rows = await sources.db.query<{ status: string; route_kind: string; n: number }>(ACTIVE_RUNS_COUNT_SQL).catch(() => null);
        this.reset();
        for (const r of rows ?? []) this.set({ status: r.status, route_kind: r.route_kind }, Number(r.n));
      },
    });
    new Counter({
      name: "svc_ledger_rows_written_total",
      help: "Ledger rows (usage_rows) written, all instances: the ledger's id sequence high-water mark, read at scrape time (a rolled-back insert leaves a gap).",
      registers,
      async collect() {
        const rows = await sources.db.query<{ n: string }>(`SELECT coalesce(max(id), 0)::text AS n FROM usage_rows`).catch(() => null);
        if (!rows) return;
        this.reset();
        this.inc(Number(rows[0].n));
      },
    });
    new Gauge({
      name: "svc_db_pool_connections",
      help: "The database pool: Postgres's pg Pool (total, idle, and waiting: requests queued for a connection); PGlite is one in-process connection (total 1, nothing idle or waiting).",
      labelNames: ["state"],
      registers,
      collect() {
        const s = sources.db.poolStats() ?? { total: 1, idle: 0, waiting: 0 };
        for (const [state, n] of Object.entries(s)) this.set({ state }, n);
      },
    });
    new Gauge({ name: "svc_db_info", help: "The database kind: pglite (embedded, a single connection) or postgres.", labelNames: ["kind"], registers }).set({ kind: sources.db.kind }, 1);
  }

  /** One answered request: `route` is the pattern (`/v1/runs/:id`), never the raw path. */
  request(method: string, route: string, status: number, seconds: number): void {
    const labels = { method, route, status: String(status) };
    this.requests.inc(labels);
    this.latency.observe(labels, seconds);
  }

  webhookAttempt(outcome: WebhookOutcome): void {
    this.webhooks.inc({ outcome });
  }

  routed(how: RoutedBy): void {
    this.routes.inc({ how });
  }

  runEnded(status: string, routeKind: string | null): void {
    this.finished.inc({ status, route_kind: routeKind ?? "none" });
  }

  /** The text exposition and its content type. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
