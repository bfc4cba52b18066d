import { ConnectionError, SvcError, UserAbortError } from "./errors.js";
import { mayRetry, retryDelayMs, sleep, type RetryKind } from "./http.js";

export interface SvcClientOptions {
  /** App key `sk_svc_<id>.<secret>`. Default: `process.env.SVC_API_KEY`. */
  apiKey?: string;
  /** Base URL ending in `/v1`. Default: `process.env.SVC_BASE_URL`. */
  baseUrl?: string;
  /** Per-request timeout in milliseconds (default 60 s). For a run's stream: the wait for its headers. */
  timeoutMs?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
  /**
   * How many times a request is tried again (default 4; `0`: never), waiting as
   * `Retry-After` says, else with exponential backoff and jitter. Reads (`GET`) are
   * tried again after a `429`, a `503` with `Retry-After`, or no answer at all;
   * `PUT`/`PATCH`/`DELETE` after a `429` or such a `503`. A `POST` is tried again only
   * when it carries an `Idempotency-Key` (the SDK sends one with each run start, chat
   * completion, steering message and answer to a run; pass `idempotencyKey` for the others), and then
   * only when the answer shows the first try was not applied: a `429`, a `503` with
   * `Service-Nothing-Created`, or a connection that was refused before anything was sent.
   */
  maxRetries?: number;
}

/** Options of one call: the last argument of every method. */
export interface RequestOptions {
  /** Aborts the call (and its retries): it rejects with a `UserAbortError`. */
  signal?: AbortSignal;
  /**
   * Sent as the `Idempotency-Key` header, the same on every retry: the service answers a
   * repeat of the same key and body (within 24 h) with the first answer. The SDK makes one
   * (`crypto.randomUUID()`) for run starts, chat completions, steering messages and answers to a run.
   */
  idempotencyKey?: string;
  /** This call's `maxRetries`. */
  maxRetries?: number;
  /** This call's `timeoutMs`. */
  timeoutMs?: number;
}

/** An environment variable, where there is a `process` (Node, Bun, Deno): the SDK needs no Node types. */
const env = (name: string): string | undefined => (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];

/** The options with their defaults applied: what every request of the SDK is made with. */
export interface ResolvedClientOptions {
  apiKey: string;
  /** Ends in `/v1`, no trailing slash. */
  baseUrl: string;
  timeoutMs: number;
  fetch: typeof fetch;
  maxRetries: number;
}

export function resolveClientOptions(options: SvcClientOptions = {}): ResolvedClientOptions {
  const apiKey = options.apiKey ?? env("SVC_API_KEY");
  const baseUrl = (options.baseUrl ?? env("SVC_BASE_URL"))?.replace(/\/+$/, "");
  if (!apiKey) throw new Error("svc: no app key: pass { apiKey } or set SVC_API_KEY.");
  if (!baseUrl) throw new Error("svc: no base URL: pass { baseUrl } (ending in /v1) or set SVC_BASE_URL.");
  return { apiKey, baseUrl, timeoutMs: options.timeoutMs ?? 60_000, fetch: options.fetch ?? fetch, maxRetries: options.maxRetries ?? 4 };
}

export type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
export type Query = Record<string, string | number | boolean | null | undefined>;

export interface ApiRequest {
  method: Method;
  /** After the base URL's `/v1`, each path parameter already encoded. */
  path: string;
  query?: Query;
  body?: unknown;
  /**
   * What may be tried again. Default: `read` for GET, `idempotent` for PUT, PATCH and
   * DELETE, `create` for a POST with an idempotency key, `never` for one without.
   */
  retry?: RetryKind;
  options?: RequestOptions;
}

/** A fresh idempotency key. */
export const newIdempotencyKey = (): string => globalThis.crypto.randomUUID();

/** Encodes one path parameter. */
export const seg = (value: string): string => encodeURIComponent(value);

/**
 * Sends the SDK's JSON requests: the app key, a deadline per try, the error
 * envelope turned into a typed `SvcError`, and the retry rules of `maxRetries`.
 */
export class Transport {
  constructor(readonly http: ResolvedClientOptions) {}

  async request<T>(req: ApiRequest): Promise<T> {
    const { method, path, query, body, options = {} } = req;
    const key = options.idempotencyKey;
    const retry: RetryKind = req.retry ?? (method === "GET" ? "read" : method === "POST" ? (key ? "create" : "never") : "idempotent");
    const maxRetries = options.maxRetries ?? this.http.maxRetries;
    const timeoutMs = options.timeoutMs ?? this.http.timeoutMs;
    const signal = options.signal;
    const url = this.http.baseUrl + path + queryString(query);
    const headers: Record<string, string> = { authorization: `Bearer ${this.http.apiKey}`, accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (key) headers["idempotency-key"] = key;
    const payload = body !== undefined ? JSON.stringify(body) : undefined;

    for (let attempt = 0; ; attempt++) {
      let err: unknown;
      try {
        return await this.#once<T>(method, url, path, headers, payload, timeoutMs, signal);
      } catch (e) {
        err = e;
      }
      if (signal?.aborted || attempt >= maxRetries || !mayRetry(err, retry)) throw err;
      // Aborting the call's signal ends the wait with the answer in hand.
      await sleep(retryDelayMs(attempt, err), signal ?? new AbortController().signal).catch(() => {
        throw err;
      });
    }
  }

  async #once<T>(method: Method, url: string, path: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number, signal?: AbortSignal): Promise<T> {
    const deadline = AbortSignal.timeout(timeoutMs);
    let res: Response;
    let text: string;
    try {
      res = await this.http.fetch(url, { method, headers, body, signal: signal ? AbortSignal.any([signal, deadline]) : deadline });
      text = await res.text();
    } catch (err) {
      if (signal?.aborted) throw new UserAbortError(`svc: ${method} ${path} was aborted.`, { cause: signal.reason });
      const why = deadline.aborted ? `no answer within ${timeoutMs} ms` : (err as Error).message;
      throw new ConnectionError(`svc: ${method} ${path} got no answer: ${why}`, { cause: err });
    }
    const parsed = /\bjson\b/.test(res.headers.get("content-type") ?? "") ? parseJson(text) : text;
    if (res.status >= 200 && res.status < 300) return parsed as T;
    throw SvcError.generate(res.status, parsed, res.headers);
  }
}

function queryString(query: Query | undefined): string {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) params.set(k, String(v));
  const s = params.toString();
  return s ? `?${s}` : "";
}

/** A JSON body, or its text when it is not JSON after all (a proxy's error page). */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
