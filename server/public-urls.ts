import { baseUrlOf, type Config } from "./config.js";

/**
 * Where clients, browsers and workers reach this service. Known once the server
 * listens (the port may be 0 until then); built from the configuration only,
 * never from a request's Host header, so no client can steer the links we hand out.
 */
export class PublicUrls {
  private baseUrl: string | null;

  constructor(private readonly config: Config) {
    this.baseUrl = config.publicUrl;
  }

  /** Called once the server listens. */
  bind(port: number): void {
    this.baseUrl = baseUrlOf(this.config, port);
  }

  /** The base URL without `/v1`, e.g. `https://svc.example.com`. */
  get base(): string {
    if (this.baseUrl === null) throw new Error("PublicUrls used before the server listens");
    return this.baseUrl;
  }

  /** The hosted connect page. */
  get connectPage(): string {
    return `${this.base}/connect`;
  }

  /** The hosted billing page (the plans and compute-status components). */
  get billingPage(): string {
    return `${this.base}/billing`;
  }

  /** Where paired workers open their WebSocket. */
  get workerConnection(): string {
    return `${this.base.replace(/^http/, "ws")}/v1/worker`;
  }
}
