import { setTimeout as sleep } from "node:timers/promises";
import { initClient, tsRestFetchApi, type ApiFetcherArgs } from "@ts-rest/core";
import { pairingContract } from "@svc/contract";

/** Tries after a `429` or a `503` that said nothing was done, before the answer is handed to the caller. */
export const API_RETRIES = 5;

/**
 * The contract's client for the worker's calls; errors come back as values
 * (status and envelope). A `429`, or a `503` whose request reached nothing
 * (`Service-Nothing-Created: true`: the service's database was unreachable), is
 * sent again after `Retry-After`, with exponential backoff and jitter, up to
 * `API_RETRIES` times; any other answer, and the last one, is the caller's.
 * Only the pairing routes (all the worker calls): the whole contract's client type
 * is past what `tsc` can write into the package's declarations.
 */
export function apiClient(server: string, retries = API_RETRIES) {
  return initClient(pairingContract, {
    baseUrl: server.replace(/\/+$/, "").replace(/\/v1$/, ""),
    baseHeaders: {},
    throwOnUnknownStatus: false,
    api: async (args: ApiFetcherArgs) => {
      for (let attempt = 0; ; attempt++) {
        const res = await tsRestFetchApi(args);
        const again = res.status === 429 || (res.status === 503 && res.headers.get("service-nothing-created") === "true");
        if (!again || attempt >= retries || args.fetchOptions?.signal?.aborted) return res;
        await sleep(retryDelayMs(attempt, res.headers.get("retry-after")), undefined, { signal: args.fetchOptions?.signal ?? undefined });
      }
    },
  });
}

/** Exponential from 500 ms doubling to 30 s with equal jitter, never sooner than `Retry-After` (seconds). */
export function retryDelayMs(attempt: number, retryAfter: string | null): number {
  const exp = Math.min(500 * 2 ** attempt, 30_000);
  const asked = retryAfter !== null && /^\d+$/.test(retryAfter.trim()) ? Math.min(Number(retryAfter) * 1000, 300_000) : 0;
  return Math.max(asked, exp / 2 + Math.random() * (exp / 2));
}

export type ApiClient = ReturnType<typeof apiClient>;

/** The error envelope's code of a non-2xx answer, if it has one. */
export function errorOf(body: unknown): { code?: string; message?: string; interval?: number } {
  return (body as { error?: { code?: string; message?: string; interval?: number } } | null)?.error ?? {};
}
