import { initClient, tsRestFetchApi, type ApiFetcherArgs } from "@ts-rest/core";
import { contract } from "@svc/contract";
import { ConnectionError, SvcError } from "./errors.js";

export interface SvcClientOptions {
  /** App key `sk_svc_<id>.<secret>`. Default: `process.env.SVC_API_KEY`. */
  apiKey?: string;
  /** Base URL ending in `/v1`. Default: `process.env.SVC_BASE_URL`. */
  baseUrl?: string;
  /** Per-request timeout in milliseconds (default 60 s). */
  timeoutMs?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

const env = (name: string): string | undefined =>
  typeof process !== "undefined" ? (process.env?.[name] as string | undefined) : undefined;

/**
 * The typed client of the contract: each method returns the 2xx body and throws a
 * `SvcError` subclass (by status and code, with the request id) for anything else.
 * Calls are never retried here: starting a run is not idempotent.
 */
export function createSvcClient(options: SvcClientOptions = {}) {
  const apiKey = options.apiKey ?? env("SVC_API_KEY");
  const baseUrl = (options.baseUrl ?? env("SVC_BASE_URL"))?.replace(/\/+$/, "");
  if (!apiKey) throw new Error("svc: no app key: pass { apiKey } or set SVC_API_KEY.");
  if (!baseUrl) throw new Error("svc: no base URL: pass { baseUrl } (ending in /v1) or set SVC_BASE_URL.");
  // The contract's paths start with /v1 (or /c/<pk>/v1); the base URL ends in /v1.
  const origin = baseUrl.replace(/\/v1$/, "");
  const timeoutMs = options.timeoutMs ?? 60_000;
  const fetchImpl = options.fetch ?? fetch;

  const raw = initClient(contract, {
    baseUrl: origin,
    baseHeaders: { authorization: `Bearer ${apiKey}` },
    throwOnUnknownStatus: false,
    api: async (args: ApiFetcherArgs) => {
      const signal = AbortSignal.any([AbortSignal.timeout(timeoutMs), ...(args.fetchOptions?.signal ? [args.fetchOptions.signal] : [])]);
      try {
        return await tsRestFetchApi({ ...args, fetchOptions: { ...args.fetchOptions, signal }, customFetch: fetchImpl } as ApiFetcherArgs);
      } catch (err) {
        throw new ConnectionError(`svc: ${args.method} ${args.path} got no answer: ${(err as Error).message}`, { cause: err });
      }
    },
  });

  const client: Record<string, unknown> = {};
  for (const [name, call] of Object.entries(raw) as [string, (...a: unknown[]) => Promise<{ status: number; body: unknown; headers: Headers }>][]) {
    client[name] = async (...args: unknown[]) => {
      const res = await call(...args);
      if (res.status >= 200 && res.status < 300) return res.body;
      throw SvcError.generate(res.status, res.body, res.headers);
    };
  }
  return client as unknown as Unwrapped<typeof raw>;
}

/** The body of the 200 answer among a route's possible answers. */
type Ok<R> = R extends { status: 200; body: infer B } ? B : never;
/** Each method of the raw ts-rest client, resolving to its 200 body (other answers throw). */
type Unwrapped<C> = { [K in keyof C]: C[K] extends (...a: infer A) => Promise<infer R> ? (...a: A) => Promise<Ok<R>> : never };

export type SvcClient = ReturnType<typeof createSvcClient>;
