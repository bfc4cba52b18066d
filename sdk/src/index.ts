export { createSvcClient, type SvcClient, type SvcClientOptions } from "./client.js";
export * from "./errors.js";
export type { RunEvent, CreateRunRequest, ErrorEnvelope, ErrorCode } from "@svc/contract";
