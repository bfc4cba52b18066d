import { initClient, tsRestFetchApi } from "@ts-rest/core";
import { OWNER_CSRF_HEADER, ownerContract } from "@svc/contract";

let csrfToken: string | null = null;

/** The session's CSRF token (from `GET /v1/owner/me` or a sign-in): sent on every request that is not a GET. */
export function setCsrfToken(token: string | null): void {
  csrfToken = token;
}

/**
 * The contract's owner routes, typed end to end. The session is the HttpOnly
 * `svc_owner` cookie, which the browser sends itself (same origin).
 */
export const api = initClient(ownerContract, {
  baseUrl: "",
  throwOnUnknownStatus: false,
  api: (args) =>
    tsRestFetchApi({
      ...args,
      headers: args.method === "GET" || csrfToken === null ? args.headers : { ...args.headers, [OWNER_CSRF_HEADER]: csrfToken },
      fetchOptions: { ...args.fetchOptions, credentials: "same-origin" },
    }),
});

/** A refused or failed request, from the service's error envelope. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId: string | null,
  ) {
    super(message);
    this.name = "ApiFailure";
  }
}

type Answer = { status: number; body: unknown; headers: Headers };
type Success<R> = R extends { status: 200 | 201 | 202 | 204; body: infer B } ? B : never;

/** The body of a 2xx answer; anything else thrown as an ApiFailure with the envelope's code and message. */
export async function call<R extends Answer>(request: Promise<R>): Promise<Success<R>> {
  let answer: R;
  try {
    answer = await request;
  } catch {
    throw new ApiFailure(0, "network_error", "The service could not be reached. Check your connection and try again.", null);
  }
  if (answer.status >= 200 && answer.status < 300) return answer.body as Success<R>;
  const error = (answer.body as { error?: { code?: string; message?: string; requestId?: string } } | null)?.error;
  throw new ApiFailure(
    answer.status,
    error?.code ?? "unknown_error",
    error?.message ?? `The service answered ${answer.status}.`,
    error?.requestId ?? answer.headers.get("request-id"),
  );
}

export const isUnauthorized = (err: unknown) => err instanceof ApiFailure && err.status === 401;
