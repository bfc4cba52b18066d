import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span, type SpanContext } from "@opentelemetry/api";
import { ATTR_ERROR_TYPE } from "@opentelemetry/semantic-conventions";
import type { ApprovalKind, ChatMessage, JobSpanRecord, JobUsage } from "@svc/contract";
import type { RunRow } from "../runs/run-rows.js";
import { boundedValue, GEN_AI, inputMessages, outputMessages } from "./genai.js";
import { contentCaptured, tracer, tracingOn } from "./tracing.js";
import { recreateMachineSpans } from "./worker-spans.js";

/**
 * The spans of a run, as the run engine drives it:
 *
 *   (the request that started it: `POST /v1/runs`, `POST /v1/chat/completions`)
 *   └ invoke_agent {model}          one per run and per instance driving it
 *     ├ chat {model}                one per model turn (an agent CLI: one per model call it reported)
 *     │ └ (the machine's spans of that job, when its user allows)
 *     ├ approval {tool}             a wait for the app's decision (a tool that needs one, an agent CLI's permission request)
 *     ├ execute_tool {tool}         an app tool call: from its hand-off to the app to its result
 *     └ svc.ledger.write            a write of the run's ledger rows (their count)
 *
 * Where the run was started, the request's trace context is kept with the run
 * (`request.otel`), so whichever instance drives it (the one holding the machine,
 * or one taking it over after a crash) puts its `invoke_agent` under that request.
 * Off, `runTrace` returns one shared no-op object: no span, no attribute is made.
 */

/** What a run keeps of the trace that started it: the request span's `traceparent`, and the app's id of the end user (the `svc.user` attribute). */
export interface RunOrigin {
  traceparent: string;
  user?: string;
}

/** The active span's trace context (the request's), to keep with a run it starts; null when tracing is off or nothing is traced. */
export function runOrigin(user: string): RunOrigin | null {
  if (!tracingOn()) return null;
  const span = trace.getActiveSpan();
  if (!span || !span.isRecording()) return null;
  return { traceparent: traceparentOf(span.spanContext()), user };
}

export function traceparentOf(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

function parseTraceparent(value: string | undefined): SpanContext | null {
  const m = value ? /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value) : null;
  if (!m || /^0+$/.test(m[1]) || /^0+$/.test(m[2])) return null;
  return { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), isRemote: true };
}

/**
 * A `svc.ledger.write` span around `write` under the active context (a request's):
 * a ledger write outside any run's driver (a run counted as it starts). `rows`: how
 * many ledger rows its result says were written.
 */
export async function ledgerWrite<T>(attributes: Attributes, write: () => Promise<T>, rows: (result: T) => number): Promise<T> {
  if (!tracingOn()) return write();
  return tracer().startActiveSpan("svc.ledger.write", { kind: SpanKind.INTERNAL, attributes }, async (span) => {
    try {
      const result = await write();
      span.setAttribute("svc.ledger.rows", rows(result));
      return result;
    } catch (err) {
      failed(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/** How a run's part in this instance ended. `moved`: another instance drives it now, or this one is stopping. */
export type RunOutcome = { status: "completed"; stopReason: string } | { status: "failed"; code: string; message: string; stopReason: string } | { status: "cancelled" } | { status: "moved" };

/** A model turn's (a job's) span: its trace context goes to the machine with the job; the machine's spans come back under it. */
export interface TurnTrace {
  /** The W3C trace context the job frame carries, when the span is traced. */
  readonly traceparent: string | undefined;
  /** The job's id, once it is sent. */
  job(jobId: string): void;
  /** The machine's own spans of the job. */
  machineSpans(sentAt: number, spans: JobSpanRecord[]): void;
  end(result: TurnResult): void;
}

export interface TurnResult {
  usage?: { inputTokens: number; outputTokens: number };
  finishReason?: string;
  output?: string;
  toolCalls?: { id?: string; name: string; arguments: string }[];
  error?: { code: string; message: string };
}

export interface RunTrace {
  /** The run's `invoke_agent` span begins (driving it, or ending it unstarted). */
  start(): void;
  end(outcome: RunOutcome, tokens?: JobUsage): void;
  /** A model turn begins: its `chat` span. */
  turn(turn: number, messages: ChatMessage[], request?: { maxTokens?: number; temperature?: number }): TurnTrace;
  /** The job of an agent run is the run itself: the machine's spans go under `invoke_agent`. */
  agentJob(): TurnTrace;
  /** An agent CLI's model call, as the machine reported its usage: its `chat` span from the first report to the final one. */
  modelCall(call: string, usage: JobUsage, partial: boolean): void;
  toolCall(callId: string, name: string, args: unknown): void;
  toolDone(callId: string, result: unknown, isError: boolean): void;
  approval(approvalId: string, what: ApprovalKind, tool: string, callId?: string): void;
  approvalDone(approvalId: string, decision: string): void;
  /** A write carrying `rows` ledger rows of the run: its `svc.ledger.write` span. */
  ledger<T>(rows: number, write: () => Promise<T>): Promise<T>;
}

const NO_TURN: TurnTrace = { traceparent: undefined, job() {}, machineSpans() {}, end() {} };
const NO_TRACE: RunTrace = {
  start() {},
  end() {},
  turn: () => NO_TURN,
  agentJob: () => NO_TURN,
  modelCall() {},
  toolCall() {},
  toolDone() {},
  approval() {},
  approvalDone() {},
  ledger: (_rows, write) => write(),
};

/** The run's spans on this instance (`instance`), or the no-op when tracing is off. */
export function runTrace(run: RunRow, instance: string, costClass: string): RunTrace {
  return tracingOn() ? new LiveRunTrace(run, instance, costClass) : NO_TRACE;
}

function failed(span: Span, err: unknown): void {
  const e = err as { code?: unknown; name?: unknown; message?: unknown } | null;
  span.setAttribute(ATTR_ERROR_TYPE, typeof e?.code === "string" ? e.code : typeof e?.name === "string" ? e.name : "_OTHER");
  span.setStatus({ code: SpanStatusCode.ERROR, ...(typeof e?.message === "string" ? { message: e.message.slice(0, 512) } : {}) });
}

class LiveRunTrace implements RunTrace {
  private span: Span | null = null;
  private ctx: Context = ROOT_CONTEXT;
  private startedAt = 0;
  private ended = false;
  private readonly turns = new Set<Span>();
  private readonly tools = new Map<string, Span>();
  private readonly approvals = new Map<string, Span>();
  private readonly calls = new Map<string, Span>();

  constructor(
    private readonly run: RunRow,
    private readonly instance: string,
    private readonly costClass: string,
  ) {}

  /** Between `start` and `end`: children are made only then (never as roots of their own). */
  private get live(): boolean {
    return this.span !== null && !this.ended;
  }

  /** What every span of the run says: which run (conversation) it belongs to. */
  private get common(): Attributes {
    return { [GEN_AI.conversation]: this.run.id };
  }

  start(): void {
    if (this.span || this.ended) return;
    const run = this.run;
    const origin = (run.request as { otel?: RunOrigin }).otel;
    const parent = parseTraceparent(origin?.traceparent);
    this.startedAt = Date.now();
    this.span = tracer().startSpan(
      `invoke_agent ${run.model}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          [GEN_AI.operation]: "invoke_agent",
          [GEN_AI.provider]: "svc",
          [GEN_AI.requestModel]: run.model,
          ...this.common,
          "svc.run.source": run.source,
          ...(run.route_kind ? { "svc.route": run.route_kind } : {}),
          "svc.cost_class": this.costClass,
          ...(origin?.user ? { "svc.user": origin.user } : {}),
          "svc.end_user.id": run.end_user_id,
          "svc.app.id": run.app_id,
          "svc.environment": run.environment,
          ...(run.machine_id ? { "svc.machine.id": run.machine_id } : {}),
          ...(run.runtime_name ? { "svc.runtime": run.runtime_name } : {}),
          "svc.instance": this.instance,
          // Driven here after another instance began it (a takeover after a crash, a machine that moved): the same trace, a new span.
          ...(run.last_seq > 0 ? { "svc.run.resumed": true } : {}),
        },
      },
      parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : ROOT_CONTEXT,
    );
    this.ctx = trace.setSpan(ROOT_CONTEXT, this.span);
  }

  end(outcome: RunOutcome, tokens?: JobUsage): void {
    if (this.ended) return;
    this.ended = true;
    const span = this.span;
    // What is still open ends with the run (a deadline passed, a cancel, the run moved).
    const why = outcome.status === "completed" ? null : outcome.status;
    for (const s of [...this.turns, ...this.calls.values(), ...this.tools.values(), ...this.approvals.values()]) {
      if (why) s.setAttribute("svc.ended_by", `run ${why}`);
      if (outcome.status === "failed") s.setStatus({ code: SpanStatusCode.ERROR, message: `the run failed: ${outcome.code}` });
      s.end();
    }
    this.turns.clear();
    this.calls.clear();
    this.tools.clear();
    this.approvals.clear();
    if (!span) return;
    span.setAttribute("svc.run.status", outcome.status);
    if (tokens) {
      span.setAttribute(GEN_AI.inputTokens, tokens.inputTokens + (tokens.cacheReadTokens ?? 0) + (tokens.cacheWriteTokens ?? 0));
      span.setAttribute(GEN_AI.outputTokens, tokens.outputTokens);
      if (tokens.cacheReadTokens) span.setAttribute(GEN_AI.cacheRead, tokens.cacheReadTokens);
      if (tokens.cacheWriteTokens) span.setAttribute(GEN_AI.cacheWrite, tokens.cacheWriteTokens);
    }
    if (outcome.status === "completed" || outcome.status === "failed") span.setAttribute(GEN_AI.finishReasons, [outcome.stopReason]);
    if (outcome.status === "failed") {
      span.setAttribute(ATTR_ERROR_TYPE, outcome.code);
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.message.slice(0, 512) });
    }
    span.end();
  }

  turn(turn: number, messages: ChatMessage[], request: { maxTokens?: number; temperature?: number } = {}): TurnTrace {
    if (!this.live) return NO_TURN;
    const run = this.run;
    const span = tracer().startSpan(
      `chat ${run.model}`,
      {
        kind: SpanKind.CLIENT,
        attributes: {
          [GEN_AI.operation]: "chat",
          [GEN_AI.provider]: run.runtime_name ?? "svc",
          [GEN_AI.requestModel]: run.model,
          ...this.common,
          "svc.turn": turn,
          ...(run.machine_id ? { "svc.machine.id": run.machine_id } : {}),
          ...(request.maxTokens !== undefined ? { [GEN_AI.maxTokens]: request.maxTokens } : {}),
          ...(request.temperature !== undefined ? { [GEN_AI.temperature]: request.temperature } : {}),
          ...(contentCaptured() ? { [GEN_AI.inputMessages]: inputMessages(messages) } : {}),
        },
      },
      this.ctx,
    );
    this.turns.add(span);
    const startedAt = Date.now();
    return {
      traceparent: sampled(span),
      job: (jobId) => span.setAttribute("svc.job.id", jobId),
      machineSpans: (sentAt, spans) => void recreateMachineSpans(span.spanContext(), startedAt, run.machine_id, sentAt, spans),
      end: (r) => {
        if (!this.turns.delete(span)) return;
        if (r.usage) {
          span.setAttribute(GEN_AI.inputTokens, r.usage.inputTokens);
          span.setAttribute(GEN_AI.outputTokens, r.usage.outputTokens);
        }
        if (r.finishReason) span.setAttribute(GEN_AI.finishReasons, [r.finishReason]);
        if (contentCaptured() && r.finishReason) span.setAttribute(GEN_AI.outputMessages, outputMessages(r.output ?? "", r.toolCalls ?? [], r.finishReason));
        if (r.error) {
          span.setAttribute(ATTR_ERROR_TYPE, r.error.code);
          span.setStatus({ code: SpanStatusCode.ERROR, message: r.error.message.slice(0, 512) });
        }
        span.end();
      },
    };
  }

  agentJob(): TurnTrace {
    const span = this.span;
    if (!span || !this.live) return NO_TURN;
    return {
      traceparent: sampled(span),
      job: (jobId) => span.setAttribute("svc.job.id", jobId),
      machineSpans: (sentAt, spans) => void recreateMachineSpans(span.spanContext(), this.startedAt, this.run.machine_id, sentAt, spans),
      end: () => {},
    };
  }

  modelCall(call: string, usage: JobUsage, partial: boolean): void {
    if (!this.live) return;
    let span = this.calls.get(call);
    if (!span) {
      span = tracer().startSpan(
        `chat ${this.run.model}`,
        { kind: SpanKind.CLIENT, attributes: { [GEN_AI.operation]: "chat", [GEN_AI.provider]: this.run.runtime_name ?? "svc", [GEN_AI.requestModel]: this.run.model, ...this.common, "svc.model_call": call.slice(0, 128) } },
        this.ctx,
      );
      this.calls.set(call, span);
    }
    span.setAttribute(GEN_AI.inputTokens, usage.inputTokens + (usage.cacheReadTokens ?? 0) + (usage.cacheWriteTokens ?? 0));
    span.setAttribute(GEN_AI.outputTokens, usage.outputTokens);
    if (usage.cacheReadTokens) span.setAttribute(GEN_AI.cacheRead, usage.cacheReadTokens);
    if (usage.cacheWriteTokens) span.setAttribute(GEN_AI.cacheWrite, usage.cacheWriteTokens);
    if (partial) return;
    this.calls.delete(call);
    span.end();
  }

  toolCall(callId: string, name: string, args: unknown): void {
    if (!this.live || this.tools.has(callId)) return;
    const span = tracer().startSpan(
      `execute_tool ${name}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          [GEN_AI.operation]: "execute_tool",
          [GEN_AI.toolName]: name,
          [GEN_AI.toolCallId]: callId,
          // The app runs it (the service hands the call over and waits): a function tool in the conventions' words.
          [GEN_AI.toolType]: "function",
          ...this.common,
          ...(contentCaptured() ? { [GEN_AI.toolArguments]: boundedValue(args) } : {}),
        },
      },
      this.ctx,
    );
    this.tools.set(callId, span);
  }

  toolDone(callId: string, result: unknown, isError: boolean): void {
    const span = this.tools.get(callId);
    if (!span) return;
    this.tools.delete(callId);
    if (contentCaptured()) span.setAttribute(GEN_AI.toolResult, boundedValue(result));
    if (isError) {
      span.setAttribute(ATTR_ERROR_TYPE, "tool_error");
      span.setStatus({ code: SpanStatusCode.ERROR, message: "the app answered the call as an error" });
    }
    span.end();
  }

  approval(approvalId: string, what: ApprovalKind, tool: string, callId?: string): void {
    if (!this.live || this.approvals.has(approvalId)) return;
    const span = tracer().startSpan(
      `approval ${tool}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: { "svc.approval.id": approvalId, "svc.approval.kind": what, [GEN_AI.toolName]: tool, ...(callId ? { [GEN_AI.toolCallId]: callId } : {}), ...this.common },
      },
      this.ctx,
    );
    this.approvals.set(approvalId, span);
  }

  approvalDone(approvalId: string, decision: string): void {
    const span = this.approvals.get(approvalId);
    if (!span) return;
    this.approvals.delete(approvalId);
    span.setAttribute("svc.approval.decision", decision);
    span.end();
  }

  async ledger<T>(rows: number, write: () => Promise<T>): Promise<T> {
    if (!this.live || rows === 0) return write();
    const span = tracer().startSpan("svc.ledger.write", { kind: SpanKind.INTERNAL, attributes: { "svc.ledger.rows": rows, ...this.common } }, this.ctx);
    try {
      return await write();
    } catch (err) {
      failed(span, err);
      throw err;
    } finally {
      span.end();
    }
  }
}

/** The span's `traceparent`, only when it is sampled (the machine records nothing for a trace nobody keeps). */
function sampled(span: Span): string | undefined {
  const sc = span.spanContext();
  return span.isRecording() && (sc.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? traceparentOf(sc) : undefined;
}
