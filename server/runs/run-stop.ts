import { RUN_STOP_CODES, type RunFailureReason, type RunStopCode } from "@svc/contract";
import type { ReportedStopCode, RunFailureCode } from "../errors.js";
import type { RunLimitsConfig } from "../config.js";

/** How a run is stopped short of completing: a failure (its code and stop reason), a cancel, or this instance letting it go; and the limits past which the service stops it. */

/** The run limits when none are configured (the defaults of the `RUN_*` variables). */
export const DEFAULT_RUN_LIMITS: RunLimitsConfig = {
  maxEvents: 50_000,
  maxEventBytes: 64 * 1024 * 1024,
  maxPermissionRequests: 1000,
  maxToolCalls: 1000,
  turnTimeoutMs: 10 * 60 * 1000,
  agentRunTimeoutMs: 60 * 60 * 1000,
  databaseOutageMs: 60 * 1000,
  queuePerMachine: 100,
  queueWaitMs: 10 * 60 * 1000,
  pauseMaxMs: 24 * 60 * 60 * 1000,
};

/**
 * Ends a run as failed: its code from the contract's run stop table (`RUN_STOP_CODES`),
 * which gives its stop reason and default message. Only a machine's own code for its
 * failure is relayed outside the table (`RunStop.reported`).
 */
export class RunStop extends Error {
  readonly code: RunFailureCode;
  readonly stopReason: RunFailureReason;

  constructor(code: RunStopCode, message?: string, relayed?: ReportedStopCode) {
    super(message ?? RUN_STOP_CODES[code].message);
    this.code = relayed ?? code;
    this.stopReason = RUN_STOP_CODES[code].stopReason;
  }

  /**
   * A job's `failed` event as reported: a lost link is `worker_lost`, a link the service
   * closed for a broken limit `machine_limit_exceeded` (both said by the service's side of
   * the link), an agent CLI's spent subscription window `usage_limit_reached` (said by the
   * worker, its message naming the reset time); any other code is the runtime's failure (`runtime_error`), its code relayed as it came.
   */
  static reported(e: { code: string; message: string }): RunStop {
    if (e.code === "worker_lost" || e.code === "machine_limit_exceeded" || e.code === "usage_limit_reached") return new RunStop(e.code, e.message);
    return new RunStop("runtime_error", e.message, e.code as ReportedStopCode);
  }
}
/** The run was cancelled on request. */
export class Cancelled extends Error {
  constructor(readonly reason: string | null) {
    super("cancelled");
  }
}
/** This instance can no longer drive the run (lease lost, machine moved, shutting down): stop without a word. */
export class Abandoned extends Error {}
