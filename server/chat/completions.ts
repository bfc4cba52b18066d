import type { z } from "zod";
import { FinishReason, type ChatCompletion, type ChatCompletionChunk, type HandedBackToolCall, type TokenUsage } from "@svc/contract";
import type { StoredEvent } from "../runs/run-rows.js";
import { runFailureEnvelope, type RunFailureCode } from "../errors.js";

type Chunk = z.infer<typeof ChatCompletionChunk>;
type Completion = z.infer<typeof ChatCompletion>;

/** The identity every chunk and the completion of one answer carry. */
export interface CompletionHead {
  id: string;
  created: number;
  model: string;
}

/** The choice's finish reason: its tool calls', else the run's stop reason when it is one, else `stop`. */
function finishOf(stopReason: string, toolCalls: HandedBackToolCall[]): FinishReason {
  if (toolCalls.length) return "tool_calls";
  const known = FinishReason.safeParse(stopReason);
  return known.success ? known.data : "stop";
}
const usageOf = (u: Pick<TokenUsage, "inputTokens" | "outputTokens">) => ({ prompt_tokens: u.inputTokens, completion_tokens: u.outputTokens, total_tokens: u.inputTokens + u.outputTokens });

/**
 * Turns a chat run's events into `chat.completion.chunk` frames, as OpenAI
 * streams them: the role first, content deltas, the tool calls whole, a
 * finish chunk, the usage chunk when asked for, `[DONE]`. A failure after the
 * stream began is a final error frame: the error envelope, with the request's id.
 */
export class ChunkWriter {
  private started = false;

  constructor(
    private readonly head: CompletionHead,
    private readonly includeUsage: boolean,
    private readonly write: (frame: string) => void,
    /** The request's id (its `Request-Id` header), carried by an error frame as by every envelope. */
    private readonly requestId: string,
  ) {}

  event(e: StoredEvent): void {
    const d = e.data;
    if (d.kind === "text_delta") return this.chunk({ content: d.text });
    if (d.kind === "run_completed") {
      const toolCalls = d.toolCalls ?? [];
      if (toolCalls.length) {
        this.chunk({ tool_calls: toolCalls.map((c, index) => ({ index, id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } })) });
      }
      this.chunk({}, finishOf(d.stopReason, toolCalls));
      if (this.includeUsage) this.frame({ ...this.base(), choices: [], usage: usageOf(d.usage) });
      return this.write("data: [DONE]\n\n");
    }
    if (d.kind === "run_cancelled") {
      this.chunk({}, "stop");
      return this.write("data: [DONE]\n\n");
    }
    if (d.kind === "run_failed") {
      // The code a failure is stored with is one `runFailureEnvelope` maps (`runtime_error` and the like); an unknown one falls to its default.
      const code = d.error.code as RunFailureCode;
      return this.write(`data: ${JSON.stringify(runFailureEnvelope(code, `The user's runtime failed: ${d.error.message}`, this.requestId))}\n\n`);
    }
  }

  /** The first chunk (the role), sent at once so a client sees the stream open. */
  open(): void {
    this.chunk({});
  }

  private chunk(delta: Chunk["choices"][number]["delta"], finish: FinishReason | null = null): void {
    if (!this.started) {
      this.started = true;
      delta = { role: "assistant", ...(delta.content === undefined && !delta.tool_calls ? { content: "" } : {}), ...delta };
    }
    this.frame({ ...this.base(), choices: [{ index: 0, delta, finish_reason: finish }] });
  }

  private base() {
    return { id: this.head.id, object: "chat.completion.chunk" as const, created: this.head.created, model: this.head.model };
  }

  private frame(chunk: Chunk): void {
    this.write(`data: ${JSON.stringify(chunk)}\n\n`);
  }
}

/** Gathers a chat run's events into one `chat.completion` (the answer without `stream`). */
export class CompletionBuilder {
  private text = "";
  result: { completion: Completion } | { error: { code: string; message: string } } | null = null;

  constructor(private readonly head: CompletionHead) {}

  event(e: StoredEvent): void {
    const d = e.data;
    if (d.kind === "text_delta") this.text += d.text;
    else if (d.kind === "turn_restarted") this.text = "";
    else if (d.kind === "run_failed") this.result = { error: d.error };
    else if (d.kind === "run_completed" || d.kind === "run_cancelled") {
      const completed = d.kind === "run_completed" ? d : null;
      const toolCalls = completed?.toolCalls ?? [];
      const content = d.output ?? this.text;
      this.result = {
        completion: {
          id: this.head.id,
          object: "chat.completion",
          created: this.head.created,
          model: this.head.model,
          choices: [
            {
              index: 0,
              message: {
                role: "assistant",
                content: content || (toolCalls.length ? null : ""),
                ...(toolCalls.length ? { tool_calls: toolCalls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } })) } : {}),
              },
              finish_reason: completed ? finishOf(completed.stopReason, toolCalls) : "stop",
            },
          ],
          ...(completed?.usage ? { usage: usageOf(completed.usage) } : {}),
        },
      };
    }
  }
}
