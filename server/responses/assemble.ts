import type { HandedBackToolCall, ResponseObject, ResponseOutputItem, ResponseStreamEvent, TokenUsage } from "@svc/contract";
import type { StoredEvent } from "../runs/run-rows.js";

/** The request's settings a response echoes (as the specification lists them), fixed when it is created. */
export interface ResponseSettings {
  instructions: string | null;
  max_output_tokens: number | null;
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  reasoning: { effort: string | null; summary: string | null };
  store: boolean;
  temperature: number;
  text: ResponseObject["text"];
  tool_choice: unknown;
  tools: ResponseObject["tools"];
  top_p: number;
  truncation: string;
  user: string | null;
  safety_identifier: string | null;
  prompt_cache_key: string | null;
  metadata: Record<string, string>;
}

/** Who a response is: its id, its time and model, and the request's settings. */
export interface ResponseHead {
  id: string;
  /** The suffix its item ids are made of (the run's). */
  suffix: string;
  created_at: number;
  model: string;
  settings: ResponseSettings;
}

/** A response's id is its run's: `resp_X` is `run_X`; its items' ids are made of the same suffix. */
export const suffixOf = (runId: string) => runId.slice(4);
export const responseIdOf = (runId: string) => `resp_${suffixOf(runId)}`;

/** One SSE frame of a response event: `event:` is its type, as OpenAI sends them. */
export const frame = (e: ResponseStreamEvent): string => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

/** What ends a response's stream, as the Open Responses specification says (OpenAI's clients skip it). */
export const DONE_FRAME = "data: [DONE]\n\n";

type Usage = Pick<TokenUsage, "inputTokens" | "outputTokens" | "cacheReadTokens" | "cacheWriteTokens">;

const usageOf = (u: Usage): NonNullable<ResponseObject["usage"]> => {
  const cached = u.cacheReadTokens ?? 0;
  const input = u.inputTokens + cached + (u.cacheWriteTokens ?? 0);
  return { input_tokens: input, input_tokens_details: { cached_tokens: cached }, output_tokens: u.outputTokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + u.outputTokens };
};

/** The response object at a point of its life. */
export function responseObject(head: ResponseHead, at: Partial<Pick<ResponseObject, "status" | "output" | "usage" | "error" | "incomplete_details" | "completed_at">> = {}): ResponseObject {
  return {
    id: head.id,
    object: "response",
    created_at: head.created_at,
    completed_at: at.completed_at ?? null,
    status: at.status ?? "in_progress",
    error: at.error ?? null,
    incomplete_details: at.incomplete_details ?? null,
    instructions: head.settings.instructions,
    max_output_tokens: head.settings.max_output_tokens,
    max_tool_calls: null,
    model: head.model,
    output: at.output ?? [],
    parallel_tool_calls: head.settings.parallel_tool_calls,
    previous_response_id: head.settings.previous_response_id,
    reasoning: head.settings.reasoning,
    store: head.settings.store,
    temperature: head.settings.temperature,
    text: head.settings.text,
    tool_choice: head.settings.tool_choice,
    tools: head.settings.tools,
    top_p: head.settings.top_p,
    truncation: head.settings.truncation,
    usage: at.usage ?? null,
    user: head.settings.user,
    safety_identifier: head.settings.safety_identifier,
    prompt_cache_key: head.settings.prompt_cache_key,
    metadata: head.settings.metadata,
    background: false,
    service_tier: "default",
    top_logprobs: 0,
    presence_penalty: 0,
    frequency_penalty: 0,
  };
}

type Emit = (event: ResponseStreamEvent) => void;

/**
 * Turns a model run's events into a response: the specification's stream
 * events as they come (each with its `sequence_number`, from 0), and the
 * response object at the end. The run's text deltas are the message's
 * `output_text` deltas; the tool calls it ends with (whole, as the worker
 * gathers them) are `function_call` items, each with its arguments in one
 * delta. Ended by the run's final event: `response.completed`,
 * `response.incomplete` (stopped at `max_output_tokens`, or cancelled) or
 * `response.failed`.
 */
export class ResponseAssembler {
  private seq = 0;
  private text = "";
  private messageOpen = false;
  /** The last `usage` event's: what the turn used. */
  private turnUsage: Usage | null = null;
  /** The response once the run ended. */
  final: ResponseObject | null = null;

  constructor(
    private readonly head: ResponseHead,
    private readonly emit: Emit,
    /** When the response ended (epoch seconds): now on the service's clock, or for a stored one its run's end. */
    private readonly endedAt: () => number,
  ) {}

  private send(event: Record<string, unknown>): void {
    this.emit({ ...event, sequence_number: this.seq++ } as ResponseStreamEvent);
  }

  private get messageId(): string {
    return `msg_${this.head.suffix}`;
  }

  /** `response.created` and `response.in_progress`, sent at once so a client sees the stream open. */
  open(): void {
    const response = responseObject(this.head);
    this.send({ type: "response.created", response });
    this.send({ type: "response.in_progress", response });
  }

  private part(text: string) {
    return { type: "output_text" as const, text, annotations: [], logprobs: [] };
  }

  private openMessage(): void {
    if (this.messageOpen) return;
    this.messageOpen = true;
    this.send({ type: "response.output_item.added", output_index: 0, item: { type: "message", id: this.messageId, status: "in_progress", role: "assistant", content: [] } });
    this.send({ type: "response.content_part.added", output_index: 0, item_id: this.messageId, content_index: 0, part: this.part("") });
  }

  /** The message item, its events closed: what was said, `completed` or `incomplete`. */
  private closeMessage(text: string, status: "completed" | "incomplete"): ResponseOutputItem {
    this.openMessage();
    this.messageOpen = false;
    const at = { output_index: 0, item_id: this.messageId, content_index: 0 };
    this.send({ type: "response.output_text.done", ...at, text, logprobs: [] });
    this.send({ type: "response.content_part.done", ...at, part: this.part(text) });
    const item: ResponseOutputItem = { type: "message", id: this.messageId, status, role: "assistant", content: [this.part(text)] };
    this.send({ type: "response.output_item.done", output_index: 0, item });
    return item;
  }

  private functionCalls(calls: HandedBackToolCall[], first: number): ResponseOutputItem[] {
    return calls.map((c, i) => {
      const output_index = first + i;
      const id = `fc_${this.head.suffix}_${i}`;
      this.send({ type: "response.output_item.added", output_index, item: { type: "function_call", id, call_id: c.id, name: c.name, arguments: "", status: "in_progress" } });
      if (c.arguments) this.send({ type: "response.function_call_arguments.delta", output_index, item_id: id, delta: c.arguments });
      this.send({ type: "response.function_call_arguments.done", output_index, item_id: id, name: c.name, arguments: c.arguments });
      const item: ResponseOutputItem = { type: "function_call", id, call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" };
      this.send({ type: "response.output_item.done", output_index, item });
      return item;
    });
  }

  event(e: StoredEvent): void {
    const d = e.data;
    if (d.kind === "text_delta") {
      const delta = d.text;
      this.openMessage();
      this.text += delta;
      this.send({ type: "response.output_text.delta", output_index: 0, item_id: this.messageId, content_index: 0, delta, logprobs: [] });
      return;
    }
    // The turn ran again on another instance (a takeover): the message starts over in the object; deltas already sent stay sent.
    if (d.kind === "turn_restarted") this.text = "";
    // What the turn used, said before the run ended: a failure's usage (its `run_failed` carries none).
    if (d.kind === "usage") this.turnUsage = d.usage;
    if (d.kind === "run_failed") {
      const usage = this.turnUsage ? usageOf(this.turnUsage) : null;
      const output = this.messageOpen || this.text ? [this.closeMessage(this.text, "incomplete")] : [];
      this.finish("response.failed", { status: "failed", output, usage, error: { type: "server_error", code: d.error.code, message: `The user's runtime failed: ${d.error.message}` } });
      return;
    }
    if (d.kind !== "run_completed" && d.kind !== "run_cancelled") return;
    const completedAt = this.endedAt();
    const text = d.output ? d.output : this.text;
    if (d.kind === "run_cancelled") {
      const output = this.messageOpen || text ? [this.closeMessage(text, "incomplete")] : [];
      this.finish("response.incomplete", { status: "incomplete", output, usage: null, incomplete_details: { reason: "cancelled" } });
      return;
    }
    const usage = d.usage ? usageOf(d.usage) : null;
    const calls = d.toolCalls ?? [];
    const truncated = d.stopReason === "length";
    const output = [...(text || !calls.length || this.messageOpen ? [this.closeMessage(text, truncated ? "incomplete" : "completed")] : [])];
    output.push(...this.functionCalls(calls, output.length));
    if (truncated) this.finish("response.incomplete", { status: "incomplete", output, usage, incomplete_details: { reason: "max_output_tokens" } });
    else this.finish("response.completed", { status: "completed", output, usage, completed_at: completedAt });
  }

  /** The stream ends before the response did (its reader too slow): an `error` event, in both its forms. */
  streamError(code: string, message: string): void {
    const error = { type: "server_error", code, message, param: null };
    this.send({ type: "error", code, message, param: null, error });
  }

  private finish(type: "response.completed" | "response.incomplete" | "response.failed", at: Parameters<typeof responseObject>[1]): void {
    this.final = responseObject(this.head, at);
    this.send({ type, response: this.final });
  }
}
