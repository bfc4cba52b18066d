import { ERROR_CODES, RUN_STOP_ERROR_TYPE, type ErrorCode, type ErrorEnvelope, type RunStopCode, type Standing } from "@svc/contract";

/** What an envelope may carry besides its code and message: the field at fault, `slow_down`'s new interval. */
export interface EnvelopeExtra {
  param?: string;
  interval?: number;
  /** A 402's standing: the user against their plan. */
  allowance?: Standing;
}

/**
 * A code a user's machine reported for its own failure (`api_error_<status>`, a
 * runtime's own error kind), relayed as it came: the one code outside the tables,
 * and only `RunStop.reported` makes one.
 */
export type ReportedStopCode = string & { readonly __reportedByTheMachine: true };
/** What a run's failure is coded with: the contract's run stop table, or the machine's own code relayed. */
export type RunFailureCode = RunStopCode | ReportedStopCode;

/**
 * The one builder of the error envelope, `{"error":{"type","code","message","requestId"}}`
 * (plus `param` or `interval` where there is one): every error the service
 * emits, on HTTP (the error handler, the parser's refusals), in a chat stream's
 * last frame, on a refused worker WebSocket and on the admin socket, is this object.
 * The type comes from the code's table; the request id is the one logged.
 */
function envelope<C extends string>(type: string, code: C, message: string, requestId: string, extra: EnvelopeExtra = {}) {
  const { param, interval, allowance } = extra;
  return {
    error: {
      type,
      code,
      message,
      requestId,
      ...(param !== undefined ? { param } : {}),
      ...(interval !== undefined ? { interval } : {}),
      ...(allowance !== undefined ? { allowance } : {}),
    },
  };
}

/** The envelope of an error code (the contract's `ERROR_CODES`): its type from the table, its message the table's unless given. */
export function errorEnvelope(code: ErrorCode, message: string | undefined, requestId: string, extra: EnvelopeExtra = {}): ErrorEnvelope {
  return envelope(ERROR_CODES[code].type, code, message ?? ERROR_CODES[code].message, requestId, extra);
}

/**
 * The envelope of a run's failure (a chat stream's last frame): the run's stop code
 * (the contract's `RUN_STOP_CODES`, or the machine's own code relayed), typed as a
 * failure on the serving side, whatever the code.
 */
export function runFailureEnvelope(code: RunFailureCode, message: string, requestId: string) {
  return envelope(RUN_STOP_ERROR_TYPE, code, message, requestId);
}

/** A job's `failed` event the service itself makes (a lost link, svc/echo's runtime), its code from the run stop table. */
export const jobFailed = (code: RunStopCode, message: string) => ({ type: "failed" as const, code, message });

/**
 * The one domain error. Services throw it; only the HTTP layer turns it into a
 * status and an envelope (through the contract's code table).
 */
export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly extra: EnvelopeExtra & { headers?: Record<string, string> } = {},
  ) {
    super(message ?? ERROR_CODES[code].message);
    this.name = "ApiError";
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  toEnvelope(requestId: string): ErrorEnvelope {
    return errorEnvelope(this.code, this.message, requestId, this.extra);
  }
}
