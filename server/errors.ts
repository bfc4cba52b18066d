import { ERROR_CODES, type ErrorCode, type ErrorEnvelope } from "@svc/contract";

/**
 * The one domain error. Services throw it; only the HTTP layer turns it into a
 * status and an envelope (through the contract's code table).
 */
export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly extra: { param?: string; interval?: number; headers?: Record<string, string> } = {},
  ) {
    super(message ?? ERROR_CODES[code].message);
    this.name = "ApiError";
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  toEnvelope(requestId: string): ErrorEnvelope {
    const { param, interval } = this.extra;
    return {
      error: {
        type: ERROR_CODES[this.code].type,
        code: this.code,
        message: this.message,
        requestId,
        ...(param !== undefined ? { param } : {}),
        ...(interval !== undefined ? { interval } : {}),
      },
    };
  }
}
