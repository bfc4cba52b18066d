import { initClient } from "@ts-rest/core";
import { contract } from "@svc/contract";

/** The contract's client for the worker's calls; errors come back as values (status and envelope). */
export function apiClient(server: string) {
  return initClient(contract, { baseUrl: server.replace(/\/+$/, "").replace(/\/v1$/, ""), baseHeaders: {}, throwOnUnknownStatus: false });
}

export type ApiClient = ReturnType<typeof apiClient>;

/** The error envelope's code of a non-2xx answer, if it has one. */
export function errorOf(body: unknown): { code?: string; message?: string; interval?: number } {
  return (body as { error?: { code?: string; message?: string; interval?: number } } | null)?.error ?? {};
}
