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
 * Whether an answer may simply be sent again: 429 (refused before anything was
 * done) and a 503 with `Retry-After` (the service is unavailable for a moment; a
 * 503 without it, such as a missing configuration, will not pass by waiting).
 * `mayHaveApplied`: the call is not idempotent (a run start), so a 503 is retried
 * only when it says nothing was created.
 */
export function isRetryableAnswer(err: unknown, mayHaveApplied = false): boolean {
  if (!(err instanceof SvcError)) return false;
  if (err.status === 429) return true;
  return err.status === 503 && err.retryAfterMs !== null && (!mayHaveApplied || err.nothingCreated);
}

/** Whether trying again may help: no answer at all, a rate limit, or a passing server error (a 501 will not pass). */
export function isTransient(err: unknown): boolean {
  if (err instanceof UserAbortError) return false;
  if (err instanceof ConnectionError) return true;
  return err instanceof SvcError && (err.status === 429 || (err.status >= 500 && err.status !== 501));
}
