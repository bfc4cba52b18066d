export { Svc, type SvcOptions } from "./svc.js";
export type { SvcClientOptions, RequestOptions, Method, Query } from "./client.js";
export * from "./errors.js";
export { Runs } from "./runs.js";
export { RunStream } from "./run-stream.js";
export { Users, Machines, Usage, Plans, Sessions, Models, Chat, ChatCompletions, ChatCompletionStream, Billing, WebhookEndpoints, WebhookDeliveries } from "./resources.js";
export { Responses, ResponseStream } from "./responses.js";
export { Page, PagePromise } from "./pagination.js";
export { readSse, readRunEvents, parseRunEventFrame, type SseFrame, type RunEventFrame } from "./sse.js";
export type {
  ApprovalAnswer,
  ApprovalHandler,
  ApprovalRequest,
  Handback,
  RunCreateParams,
  RunEventOf,
  RunEventsOptions,
  RunFollowUpOptions,
  RunSendOptions,
  RunResult,
  RunStatusFinal,
  RunTool,
  ServedInApp,
  ToolContext,
} from "./types.js";
export type * from "./wire.js";
