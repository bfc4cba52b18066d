import { JOB_SPANS_MAX, type Job, type JobEvent, type JobSpanRecord } from "@svc/contract";

/** Characters kept of a string attribute (names: a runtime, a tool, a finish reason). */
const VALUE_CHARS = 256;

/**
 * The spans this machine records for one job, when its user's policy lets it send
 * traces (`telemetry.traces`) and the service asked for them (the job came with a
 * `traceparent`, to a service that announced `job_spans`). Plain records, no
 * OpenTelemetry SDK: the job itself (`model_turn <runtime>`: the call to the local
 * model server; `agent_run <runtime>`: the CLI's run), and under it each call of
 * one of the app's tools through the bridge (`tool_call <name>`, from the CLI's
 * call to the answer back) and each permission request (`permission <tool>`, who
 * decided: the app, or this machine's policy or user). Names, times, counts and
 * outcomes only: never a prompt, an output, an argument or an error's text. Sent
 * once, before the job's last event; at most `JOB_SPANS_MAX` (the rest counted).
 */
export class JobSpans {
  private readonly job: JobSpanRecord & { attributes: NonNullable<JobSpanRecord["attributes"]> };
  private readonly spans: JobSpanRecord[] = [];
  private readonly open = new Map<string, JobSpanRecord>();
  private dropped = 0;
  private firstChunkAt: number | null = null;
  private modelCalls = new Set<string>();
  private activities = 0;

  constructor(job: Job, runtime: string) {
    const start = Date.now();
    const model = job.model;
    this.job = {
      id: "job",
      name: `${job.kind} ${runtime}`.slice(0, 128),
      kind: job.kind === "model_turn" ? "client" : "internal",
      start,
      end: start,
      attributes: { "svc.worker.job.kind": job.kind, "svc.worker.runtime": short(runtime), ...(model ? { "gen_ai.request.model": short(model) } : {}) },
    };
  }

  /** A job event on its way to the service. */
  event(e: JobEvent): void {
    const now = Date.now();
    if ((e.type === "text_delta" || e.type === "tool_call") && this.firstChunkAt === null) this.firstChunkAt = now;
    if (e.type === "usage") this.modelCalls.add(e.call);
    if (e.type === "activity") this.activities++;
  }

  /** A call of one of the app's tools, made by the CLI through the bridge. */
  toolCall(id: string, name: string): void {
    this.begin(`tool:${id}`, `tool_call ${name}`, { "gen_ai.tool.name": short(name), "gen_ai.tool.call.id": short(id) });
  }

  toolAnswered(id: string, isError: boolean): void {
    this.finish(`tool:${id}`, isError ? { code: "error" } : undefined, isError ? { "error.type": "tool_error" } : {});
  }

  /** A permission request of the CLI, before the policy (and maybe the app) decides. */
  permission(requestId: string, tool: string): void {
    this.begin(`permission:${requestId}`, `permission ${tool}`, { "gen_ai.tool.name": short(tool) });
  }

  permissionAnswered(requestId: string, allow: boolean, decidedBy: "app" | "machine"): void {
    this.finish(`permission:${requestId}`, undefined, { "svc.worker.allowed": allow, "svc.worker.decided_by": decidedBy });
  }

  /** Everything recorded, the job's span ended by its last event; what is still open ends now. */
  records(end: JobEvent): JobSpanRecord[] {
    const now = Date.now();
    for (const key of [...this.open.keys()]) this.finish(key, undefined, { "svc.worker.unanswered": true });
    const a = this.job.attributes;
    this.job.end = now;
    if (this.firstChunkAt !== null && this.job.kind === "client") a["gen_ai.response.time_to_first_chunk"] = (this.firstChunkAt - this.job.start) / 1000;
    if (this.modelCalls.size) a["svc.worker.model_calls"] = this.modelCalls.size;
    if (this.activities) a["svc.worker.activities"] = this.activities;
    if (end.type === "done") {
      a["svc.worker.finish_reason"] = short(end.finishReason);
      a["svc.worker.input_tokens"] = end.usage.inputTokens;
      a["svc.worker.output_tokens"] = end.usage.outputTokens;
      this.job.status = { code: "ok" };
    } else if (end.type === "failed") {
      a["error.type"] = short(end.code);
      this.job.status = { code: "error" };
    }
    if (this.dropped) a["svc.worker.spans_dropped"] = this.dropped;
    return [this.job, ...this.spans];
  }

  private begin(key: string, name: string, attributes: Record<string, string>): void {
    if (this.open.has(key)) return;
    // The job's own record counts too.
    if (this.spans.length + this.open.size + 1 >= JOB_SPANS_MAX) return void this.dropped++;
    const now = Date.now();
    this.open.set(key, { id: `s${this.spans.length + this.open.size + 1}`, parent: "job", name: name.slice(0, 128), start: now, end: now, attributes });
  }

  private finish(key: string, status: JobSpanRecord["status"], attributes: Record<string, string | number | boolean>): void {
    const span = this.open.get(key);
    if (!span) return;
    this.open.delete(key);
    span.end = Date.now();
    span.attributes = { ...span.attributes, ...attributes };
    if (status) span.status = status;
    this.spans.push(span);
  }
}

const short = (s: string) => s.slice(0, VALUE_CHARS);
