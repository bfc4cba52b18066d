import { createSvcClient, resolveClientOptions, type SvcClient, type SvcClientOptions } from "./client.js";
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
 * ```
 *
 * `svc.runs` drives runs; `svc.api` is the typed client of every endpoint.
 */
export class Svc {
  readonly runs: Runs;
  /** Every endpoint of the contract: each method resolves to its 200 body and throws a typed `SvcError` otherwise. */
  readonly api: SvcClient;

  constructor(options: SvcOptions = {}) {
    const http = resolveClientOptions(options);
    this.api = createSvcClient(options);
    this.runs = new Runs({ http, api: this.api, maxReconnects: Math.max(0, options.maxReconnects ?? 5) });
  }
}
