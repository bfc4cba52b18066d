import type { Job, JobEvent, RuntimeAdvert } from "@svc/contract";

/** How a running job asks the user (through the app) before an agent acts. */
export type AskPermission = (request: { requestId: string; tool: string; input: unknown; description?: string }) => Promise<{ allow: boolean; message?: string }>;

export interface JobContext {
  emit(event: JobEvent): void;
  signal: AbortSignal;
  askPermission: AskPermission;
}

/** A runtime this machine serves: what it advertises, and how it runs one job. */
export interface Runtime {
  advert: RuntimeAdvert;
  /** Runs one job to its end; the last event emitted is `done` or `failed`. */
  run(job: Job, ctx: JobContext): Promise<void>;
}

export const failed = (code: string, message: string): JobEvent => ({ type: "failed", code, message });
