import { ErrorEnvelope } from "@svc/contract";
import type { ErrorCode, Standing } from "./wire.js";

/** Any error answered by the service: carries the HTTP status, the envelope's `code` and `type`, and the request id. */
export class SvcError extends Error {
  readonly status: number;
  readonly code: ErrorCode | null;
  readonly type: string | null;
  readonly requestId: string | null;
  /** The `interval` of a `slow_down`, the `param` of an invalid request, when present. */
  readonly param?: string;
  /**
   * The run the answer was about (its `Service-Run-Id` header), when there is one: a run
   * refused after it was counted, or handed back with `serve_in_app`, still has an id.
   */
  readonly runId: string | null;
  /** `Retry-After` of a 429 or 503, in milliseconds: how long the service asked to wait before trying again. */
  readonly retryAfterMs: number | null;
  /**
   * A 503 whose request reached nothing (`Service-Nothing-Created: true`): it created and changed
   * nothing, so even a run start may be sent again without counting a run twice.
   */
  readonly nothingCreated: boolean;

  constructor(status: number, body: unknown, headers?: Headers) {
    const parsed = ErrorEnvelope.safeParse(body);
    const e = parsed.success ? parsed.data.error : null;
    super(e?.message ?? `HTTP ${status}`);
    this.name = new.target.name;
    this.status = status;
    this.code = e?.code ?? null;
    this.type = e?.type ?? null;
    this.requestId = e?.requestId ?? headers?.get("request-id") ?? null;
    this.param = e?.param;
    this.runId = headers?.get("service-run-id") ?? null;
    this.retryAfterMs = parseRetryAfter(headers?.get("retry-after") ?? null);
    this.nothingCreated = headers?.get("service-nothing-created") === "true";
  }

  /** The error class for a status and code, built the one way (as the OpenAI SDK does). */
  static generate(status: number, body: unknown, headers?: Headers): SvcError {
    const code = ErrorEnvelope.safeParse(body).data?.error.code;
    if (status === 409 && code === "serve_in_app") return new ServeInAppError(status, body, headers);
    const Class = BY_STATUS[status] ?? (status >= 500 ? InternalServerError : SvcError);
    return new Class(status, body, headers);
  }
}

export class BadRequestError extends SvcError {}
export class AuthenticationError extends SvcError {}
/** 402: the user's plan allowance is used up (or a spend ceiling is reached). */
export class PaymentRequiredError extends SvcError {
  /** Where the user stands: used, remaining, the spend and its ceiling, and when the window resets (`resetsAt`). */
  readonly allowance: Standing | null;

  constructor(status: number, body: unknown, headers?: Headers) {
    super(status, body, headers);
    this.allowance = (ErrorEnvelope.safeParse(body).data?.error.allowance as Standing | undefined) ?? null;
  }
}
export class PermissionDeniedError extends SvcError {}
export class NotFoundError extends SvcError {}
export class ConflictError extends SvcError {}
/** 409 `serve_in_app`: the user has no reachable compute; the app serves the run itself (it is already counted). */
export class ServeInAppError extends ConflictError {}
export class RateLimitError extends SvcError {}
export class InternalServerError extends SvcError {}
/** 503: the service cannot answer for a moment (its database is unreachable, say); `retryAfterMs` says when to try again. */
export class ServiceUnavailableError extends InternalServerError {}
/** 501: the endpoint is not built yet on this server. */
export class NotImplementedError extends InternalServerError {}
/** The request never got an answer (network, timeout, abort), or a run's stream could not be re-attached. */
export class ConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}
/** The caller stopped reading (its `signal` aborted, or it left the `for await` loop). The run itself goes on. */
export class UserAbortError extends ConnectionError {}
/** A run event that does not match the contract: the service and this SDK disagree, so guessing would be worse. */
export class MalformedEventError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedEventError";
  }
}

const BY_STATUS: Record<number, new (status: number, body: unknown, headers?: Headers) => SvcError> = {
  400: BadRequestError,
  401: AuthenticationError,
  402: PaymentRequiredError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: BadRequestError,
  415: BadRequestError,
  422: BadRequestError,
  429: RateLimitError,
  501: NotImplementedError,
  503: ServiceUnavailableError,
};

/** `Retry-After` as seconds or an HTTP date, in milliseconds (at most an hour); null when absent or unreadable. */
function parseRetryAfter(value: string | null): number | null {
  if (value === null || value.trim() === "") return null;
  const ms = /^\s*\d+(\.\d+)?\s*$/.test(value) ? Number(value) * 1000 : Date.parse(value) - Date.now();
  if (!Number.isFinite(ms)) return null;
  return Math.min(Math.max(ms, 0), 3_600_000);
}
