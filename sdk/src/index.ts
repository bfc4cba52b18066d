export { createSvcClient, type SvcClient, type SvcClientOptions } from "./client.js";
export * from "./errors.js";
export { Svc, type SvcOptions } from "./svc.js";
export { Runs } from "./runs.js";
export { RunStream } from "./run-stream.js";
export { readSse, readRunEvents, parseRunEventFrame, type SseFrame, type RunEventFrame } from "./sse.js";
export type {
  ApprovalAnswer,
  ApprovalHandler,
  ApprovalRequest,
  CancelRunResponse,
  Handback,
  RouteKind,
  Run,
  RunCreateParams,
  RunEventOf,
  RunEventsOptions,
  RunResult,
  RunStatusFinal,
  RunTool,
  ServedInApp,
  ToolContext,
} from "./types.js";
export type { RunEvent, CreateRunRequest, ErrorEnvelope, ErrorCode } from "@svc/contract";
