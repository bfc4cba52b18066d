import { resolveClientOptions, Transport, type RequestOptions, type SvcClientOptions, type Method, type Query } from "./client.js";
import { Responses } from "./responses.js";
import { Billing, Chat, Machines, Models, Plans, Sessions, Usage, Users, WebhookDeliveries, WebhookEndpoints } from "./resources.js";
import { Runs } from "./runs.js";

export interface SvcOptions extends SvcClientOptions {
  /** Re-attach attempts in a row, after a run's stream drops, before giving up with a `ConnectionError` (default 5; backoff 200 ms, doubling). */
  maxReconnects?: number;
}

/**
 * The svc SDK, for app servers:
 *
 * ```ts
 * const svc = new Svc(); // SVC_API_KEY, SVC_BASE_URL (ending in /v1)
 * const run = svc.runs.create({ user: "alice", prompt: "Hi", tools, onApproval, serveInApp });
 * for await (const event of run) if (event.kind === "text_delta") process.stdout.write(event.text);
 * const result = await run.result();
 *
 * const user = await svc.users.retrieve("alice");
 * for await (const row of svc.usage.list({ user: "alice" })) console.log(row.kind, row.amountMicros);
 * ```
 *
 * Each method resolves to the service's answer and throws a typed `SvcError` otherwise.
 */
export class Svc {
  /** Start runs and drive them (tools, approvals, re-attach), continue and steer them (conversations), read, cancel, re-attach, report a handed-back run's usage. */
  readonly runs: Runs;
  readonly users: Users;
  readonly machines: Machines;
  readonly usage: Usage;
  readonly plans: Plans;
  readonly sessions: Sessions;
  readonly models: Models;
  readonly chat: Chat;
  /** The Responses API: a model response for `user`, the caller running its function tools; stored responses. */
  readonly responses: Responses;
  readonly billing: Billing;
  readonly webhookEndpoints: WebhookEndpoints;
  readonly webhookDeliveries: WebhookDeliveries;
  readonly #api: Transport;

  constructor(options: SvcOptions = {}) {
    const http = resolveClientOptions(options);
    const api = (this.#api = new Transport(http));
    this.runs = new Runs({ http, api, maxReconnects: Math.max(0, options.maxReconnects ?? 5) });
    this.users = new Users(api);
    this.machines = new Machines(api);
    this.usage = new Usage(api);
    this.plans = new Plans(api);
    this.sessions = new Sessions(api);
    this.models = new Models(api);
    this.chat = new Chat(api);
    this.responses = new Responses(api);
    this.billing = new Billing(api);
    this.webhookEndpoints = new WebhookEndpoints(api);
    this.webhookDeliveries = new WebhookDeliveries(api);
  }

  /**
   * Any other endpoint, by method and path after `/v1` (e.g. `"/runs/run_1"`), with the
   * same key, errors and retry rules as the methods above; `T` is what you expect back.
   */
  request<T = unknown>(method: Method, path: string, params: { query?: Query; body?: unknown } = {}, options?: RequestOptions): Promise<T> {
    return this.#api.request<T>({ method, path: path.startsWith("/") ? path : `/${path}`, ...params, options });
  }
}
