import type { ChatMessage, ChatTool, HandedBackToolCall, JobEvent } from "@svc/contract";
import { RunDriver, type RunEnd } from "./driver.js";

/** What a chat-completions run asks of the model: the caller's conversation and tools, as sent. */
export interface ChatParams {
  messages: ChatMessage[];
  tools?: ChatTool[];
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  /** The chat-completions `response_format` (a Responses request's `text.format`). */
  responseFormat?: Record<string, unknown>;
  /** `reasoning.effort` of a Responses request, for runtimes that take `reasoning_effort`. */
  reasoningEffort?: string;
  /** The chat-completions `tool_choice` (`required`, or one function) and `parallel_tool_calls` of a Responses request. */
  toolChoice?: "required" | { type: "function"; function: { name: string } };
  parallelToolCalls?: boolean;
}

/**
 * A chat completion on the user's model runtime: one model turn with the
 * caller's messages and tools. The caller owns the loop, so the model's tool
 * calls end the run and go back to the caller (in `run_completed`), never to an
 * app tool. Taken over mid-turn, the turn runs again.
 */
export class ChatTurnDriver extends RunDriver {
  private text = "";

  protected override partialOutput(): string {
    return this.text;
  }

  protected async loop(): Promise<RunEnd> {
    const chat = (this.run.request as unknown as { chat: ChatParams }).chat;
    if (this.seq > 1) this.emit("turn_restarted", { turn: 1, reason: "the instance driving the run was lost; the turn runs again" });
    const calls: HandedBackToolCall[] = [];
    const turn = this.trace.turn(1, chat.messages, { maxTokens: chat.maxTokens, temperature: chat.temperature });
    const done = await new Promise<Extract<JobEvent, { type: "done" }>>((resolve, reject) => {
      this.dispatch(
        {
          kind: "model_turn",
          runtime: this.run.runtime_name!,
          model: this.run.model,
          messages: chat.messages,
          ...(chat.tools?.length ? { tools: chat.tools } : {}),
          ...(chat.maxTokens ? { maxTokens: chat.maxTokens } : {}),
          ...(chat.temperature !== undefined ? { temperature: chat.temperature } : {}),
          ...(chat.topP !== undefined ? { topP: chat.topP } : {}),
          ...(chat.responseFormat ? { responseFormat: chat.responseFormat } : {}),
          ...(chat.reasoningEffort ? { reasoningEffort: chat.reasoningEffort } : {}),
          ...(chat.toolChoice ? { toolChoice: chat.toolChoice } : {}),
          ...(chat.parallelToolCalls !== undefined ? { parallelToolCalls: chat.parallelToolCalls } : {}),
        },
        (e) => {
          if (e.type === "text_delta") {
            this.text += e.text;
            this.emitText(1, e.text);
          } else if (e.type === "tool_call") calls.push({ id: e.id, name: e.name, arguments: e.arguments });
          else if (e.type === "done") {
            turn.end({ usage: e.usage, finishReason: e.finishReason, output: this.text || e.output, toolCalls: calls });
            resolve(e);
          } else if (e.type === "failed") {
            const stop = this.failure(e);
            turn.end({ error: { code: stop.code, message: stop.message } });
            reject(stop);
          }
        },
        turn,
      );
    }).finally(() => turn.end({}));
    const { row } = this.usage(1, done.usage.inputTokens, done.usage.outputTokens);
    return {
      output: this.text || done.output,
      stopReason: done.finishReason,
      patch: { turns: 1, addInputTokens: done.usage.inputTokens, addOutputTokens: done.usage.outputTokens },
      extra: { usage: [row] },
      completion: calls.length ? { toolCalls: calls } : {},
    };
  }
}
