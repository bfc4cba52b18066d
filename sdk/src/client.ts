import { initClient, type ApiFetcherArgs } from "@ts-rest/core";
import { contract } from "@svc/contract";
import { ConnectionError, SvcError } from "./errors.js";
import { isRetryableAnswer, retryDelayMs, sleep } from "./http.js";

export interface SvcClientOptions {
  /** App key `sk_svc_<id>.<secret>`. Default: `process.env.SVC_API_KEY`. */
  apiKey?: string;
  /** Base URL ending in `/v1`. Default: `process.env.SVC_BASE_URL`. */
  baseUrl?: string;
  /** Per-request timeout in milliseconds (default 60 s). */
  timeoutMs?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
  /**
   * Tries again after a `429` or `503` answer (default 4), waiting as `Retry-After` says,
   * with exponential backoff and jitter. Calls that may create something twice (a run start,
   * a new session, plan or webhook endpoint) are tried again after a `503` only when it says
   * nothing was created (`Service-Nothing-Created`). `0`: never.
   */
  maxRetries?: number;
}

const env = (name: string): string | undefined =>
  typeof process !== "undefined" ? (process.env?.[name] as string | undefined) : undefined;

/** The options with their defaults applied: what every request of the SDK is made with. */
export interface ResolvedClientOptions {
  apiKey: string;
  /** Ends in `/v1`, no trailing slash. */
  baseUrl: string;
  /** The base URL without `/v1`: the contract's paths start with `/v1` (or `/c/<pk>/v1`). */
  origin: string;
  timeoutMs: number;
  fetch: typeof fetch;
  maxRetries: number;
}

export function resolveClientOptions(options: SvcClientOptions = {}): ResolvedClientOptions {
  const apiKey = options.apiKey ?? env("SVC_API_KEY");
  const baseUrl = (options.baseUrl ?? env("SVC_BASE_URL"))?.replace(/\/+$/, "");
  if (!apiKey) throw new Error("svc: no app key: pass { apiKey } or set SVC_API_KEY.");
  if (!baseUrl) throw new Error("svc: no base URL: pass { baseUrl } (ending in /v1) or set SVC_BASE_URL.");
  return { apiKey, baseUrl, origin: baseUrl.replace(/\/v1$/, ""), timeoutMs: options.timeoutMs ?? 60_000, fetch: options.fetch ?? fetch, maxRetries: options.maxRetries ?? 4 };
}

/**
 * The typed client of the contract: each method returns the 2xx body and throws a
 * `SvcError` subclass (by status and code, with the request id) for anything else.
 * A `429` or `503` answer is tried again (`maxRetries`): idempotent calls and the
 * answers to a run (the service takes one answer per call, and refuses a repeat
 * with `409`) whatever the 503; calls that create something only when the 503 says
 * nothing was created. No answer at all is never retried here: whether the
 * request was applied is unknown.
 */
export function createSvcClient(options: SvcClientOptions = {}) {
  const { apiKey, origin, timeoutMs, fetch: fetchImpl, maxRetries } = resolveClientOptions(options);

  const raw = initClient(contract, {
    baseUrl: origin,
    baseHeaders: { authorization: `Bearer ${apiKey}` },
    throwOnUnknownStatus: false,
    // ts-rest's own fetcher (`tsRestFetchApi`) always calls the global fetch: this one
    // does the same with the `fetch` option, and a deadline on every request.
    api: async ({ path, method, headers, body, fetchOptions }: ApiFetcherArgs) => {
      const signal = AbortSignal.any([AbortSignal.timeout(timeoutMs), ...(fetchOptions?.signal ? [fetchOptions.signal] : [])]);
      try {
        const res = await fetchImpl(path, { ...fetchOptions, method, headers, body, signal });
        const type = res.headers.get("content-type") ?? "";
        const text = await res.text();
        return { status: res.status, body: /\bjson\b/.test(type) ? parseJson(text) : text, headers: res.headers };
      } catch (err) {
        throw new ConnectionError(`svc: ${method} ${path} got no answer: ${(err as Error).message}`, { cause: err });
      }
    },
  });

  const client: Record<string, unknown> = {};
  for (const [name, call] of Object.entries(raw) as [string, (...a: unknown[]) => Promise<{ status: number; body: unknown; headers: Headers }>][]) {
    const route = (contract as Record<string, { method: string }>)[name];
    const mayCreate = route.method === "POST" && !ANSWERS.has(name);
    client[name] = async (...args: unknown[]) => {
      const signal = (args[0] as { fetchOptions?: { signal?: AbortSignal } } | undefined)?.fetchOptions?.signal;
      for (let attempt = 0; ; attempt++) {
        const res = await call(...args);
        if (res.status >= 200 && res.status < 300) return res.body;
        const err = SvcError.generate(res.status, res.body, res.headers);
        if (attempt >= maxRetries || !isRetryableAnswer(err, mayCreate) || signal?.aborted) throw err;
        // Aborting the call's signal ends the wait with the answer in hand.
        await sleep(retryDelayMs(attempt, err), signal ?? new AbortController().signal).catch(() => {
          throw err;
        });
      }
    };
  }
  return client as unknown as Unwrapped<typeof raw>;
}

/** POSTs that answer a run: the service takes one per call and refuses a repeat, so they are safe to send again. */
const ANSWERS = new Set(["submitToolResult", "submitApproval", "cancelRun", "reportRunUsage"]);

/** A JSON body, or its text when it is not JSON after all (a proxy's error page). */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The body of the 200 answer among a route's possible answers. */
type Ok<R> = R extends { status: 200; body: infer B } ? B : never;
/** Each method of the raw ts-rest client, resolving to its 200 body (other answers throw). */
type Unwrapped<C> = { [K in keyof C]: C[K] extends (...a: infer A) => Promise<infer R> ? (...a: A) => Promise<Ok<R>> : never };

export type SvcClient = ReturnType<typeof createSvcClient>;
