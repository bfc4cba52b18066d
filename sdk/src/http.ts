import type { ResolvedClientOptions } from "./client.js";
import { ConnectionError, SvcError, UserAbortError } from "./errors.js";

export interface StreamRequest {
  method: "GET" | "POST";
  /** After the base URL's `/v1`, e.g. `/runs`. */
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/**
 * Opens a `text/event-stream` request and returns the response once its headers
 * are in. `timeoutMs` bounds only the wait for the headers: a run's stream lasts
 * as long as the run, so its body has no deadline (dropped streams are the
 * reconnect logic's business). A non-2xx answer throws the typed `SvcError`
 * (with `runId` from `Service-Run-Id` when the service sent one).
 */
export async function openEventStream(http: ResolvedClientOptions, req: StreamRequest, signal: AbortSignal): Promise<Response> {
  const headersDeadline = new AbortController();
  const timer = setTimeout(() => headersDeadline.abort(), http.timeoutMs);
  let res: Response;
  try {
    res = await http.fetch(`${http.baseUrl}${req.path}`, {
      method: req.method,
      headers: {
        authorization: `Bearer ${http.apiKey}`,
        accept: "text/event-stream",
        ...(req.body !== undefined ? { "content-type": "application/json" } : {}),
        ...req.headers,
      },
      body: req.body !== undefined ? JSON.stringify(req.body) : undefined,
      signal: AbortSignal.any([signal, headersDeadline.signal]),
    });
  } catch (err) {
    if (signal.aborted) throw new UserAbortError(`svc: ${req.method} ${req.path} was aborted.`, { cause: signal.reason });
    const why = headersDeadline.signal.aborted ? `no answer within ${http.timeoutMs} ms` : (err as Error).message;
    throw new ConnectionError(`svc: ${req.method} ${req.path} got no answer: ${why}`, { cause: err });
  } finally {
    clearTimeout(timer);
  }
  if (!res.ok) throw SvcError.generate(res.status, await readErrorBody(res), res.headers);
  if (!res.body || !/^text\/event-stream\b/i.test(res.headers.get("content-type") ?? "")) {
    await res.body?.cancel().catch(() => {});
    throw new ConnectionError(`svc: ${req.method} ${req.path} answered ${res.status} with ${res.headers.get("content-type") ?? "no content type"}, not an event stream.`);
  }
  return res;
}

/** The error envelope of an answer, or its text when it is not JSON (a proxy's HTML page). */
async function readErrorBody(res: Response): Promise<unknown> {
  const text = await res.text().catch(() => "");
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Waits `ms`, or rejects with a `UserAbortError` as soon as `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new UserAbortError("svc: aborted.", { cause: signal.reason }));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new UserAbortError("svc: aborted.", { cause: signal.reason }));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * How long to wait before try `attempt + 1` (0-based): exponential backoff from
 * 250 ms doubling to at most 10 s, with equal jitter (half fixed, half random, so
 * clients refused together do not come back together), and never sooner than the
 * answer's `Retry-After`.
 */
export function retryDelayMs(attempt: number, err?: unknown): number {
  const exp = Math.min(250 * 2 ** attempt, 10_000);
  const jittered = exp / 2 + Math.random() * (exp / 2);
  const asked = err instanceof SvcError ? (err.retryAfterMs ?? 0) : 0;
  return asked > 0 ? asked + Math.random() * Math.min(asked / 4, 1_000) : jittered;
}

/**
 * What a request may be tried again after:
 * - `read` (GET): a `429`, a `503` with `Retry-After`, or no answer at all (not an abort).
 * - `idempotent` (PUT, PATCH, DELETE, and the answers to a run, which the service takes once
 *   per call and refuses to repeat with `409`): a `429` or a `503` with `Retry-After`.
 * - `create` (a POST with an `Idempotency-Key`: a run start, a chat completion): a `429`, a
 *   `503` with `Service-Nothing-Created`, a `409 idempotency_key_in_use` (the first try is
 *   still being handled), and no answer at all: the service gives a repeat of the key the
 *   first try's answer (a run start: the same run), so sending it again cannot do it twice.
 *   Not a `503` that cannot promise nothing was created: the service releases a key on a
 *   5xx, so its repeat would run again.
 * - `never` (a POST without a key): nothing.
 *
 * A `503` without `Retry-After` (a missing configuration) will not pass by waiting.
 */
export type RetryKind = "read" | "idempotent" | "create" | "never";

export function mayRetry(err: unknown, kind: RetryKind): boolean {
  if (kind === "never" || err instanceof UserAbortError) return false;
  if (err instanceof ConnectionError) return kind === "read" || kind === "create" || neverSent(err);
  if (!(err instanceof SvcError)) return false;
  if (err.status === 429) return true;
  if (kind === "create" && err.status === 409 && err.code === "idempotency_key_in_use") return true;
  if (err.status !== 503 || err.retryAfterMs === null) return false;
  return kind !== "create" || err.nothingCreated;
}

/** The codes of a connection that failed before any byte of the request went out. */
const NEVER_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ENETUNREACH", "EHOSTUNREACH"]);

/** Whether a failed request certainly never reached the service (its connection was refused, its host not found). */
export function neverSent(err: unknown): boolean {
  for (let e = err, depth = 0; e && depth < 6; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NEVER_SENT.has(code)) return true;
  }
  return false;
}

/** Whether trying again may help: no answer at all, a rate limit, or a passing server error (a 501 will not pass). */
export function isTransient(err: unknown): boolean {
  if (err instanceof UserAbortError) return false;
  if (err instanceof ConnectionError) return true;
  return err instanceof SvcError && (err.status === 429 || (err.status >= 500 && err.status !== 501));
}
