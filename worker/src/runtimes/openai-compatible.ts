import { createParser } from "eventsource-parser";
import type { Job, RuntimeAdvert } from "@svc/contract";
import { failed, type JobContext, type Runtime } from "./runtime.js";

interface ChunkToolCall {
  index: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}
interface Chunk {
  choices?: { delta?: { content?: string | null; tool_calls?: ChunkToolCall[] }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
}

/**
 * A model runtime spoken to through its OpenAI-compatible chat API (Ollama,
 * llama.cpp server, LM Studio and any compatible server all have one): one
 * streamed turn per job, text deltas relayed as they come, tool calls gathered
 * from their deltas and handed back whole.
 */
export class OpenAICompatibleRuntime implements Runtime {
  constructor(
    readonly advert: RuntimeAdvert,
    /** The server's base URL, without `/v1`. */
    private readonly baseUrl: string,
    private readonly apiKey?: string,
  ) {}

  async run(job: Job, ctx: JobContext): Promise<void> {
    if (job.kind !== "model_turn") return ctx.emit(failed("unsupported_job", `${this.advert.name} runs model turns, not ${job.kind}.`));
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}) },
        body: JSON.stringify({
          model: job.model,
          messages: job.messages,
          ...(job.tools?.length ? { tools: job.tools } : {}),
          ...(job.maxTokens ? { max_tokens: job.maxTokens } : {}),
          ...(job.temperature !== undefined ? { temperature: job.temperature } : {}),
          stream: true,
          stream_options: { include_usage: true },
        }),
        signal: ctx.signal,
      });
    } catch (err) {
      return ctx.emit(ctx.signal.aborted ? failed("cancelled", "The job was cancelled.") : failed("runtime_unreachable", `${this.advert.name} did not answer: ${(err as Error).message}`));
    }
    if (!res.ok || !res.body) {
      const text = await res.text().catch(() => "");
      return ctx.emit(failed("runtime_error", `${this.advert.name} answered ${res.status}: ${text.slice(0, 500)}`));
    }

    let output = "";
    let finishReason = "stop";
    const usage = { inputTokens: 0, outputTokens: 0 };
    const calls: { id: string; name: string; arguments: string }[] = [];
    let malformed: string | null = null;
    const parser = createParser({
      onEvent: (e) => {
        if (e.data === "[DONE]") return;
        let chunk: Chunk;
        try {
          chunk = JSON.parse(e.data) as Chunk;
        } catch {
          malformed = e.data.slice(0, 200);
          return;
        }
        for (const choice of chunk.choices ?? []) {
          const text = choice.delta?.content;
          if (text) {
            output += text;
            ctx.emit({ type: "text_delta", text });
          }
          for (const tc of choice.delta?.tool_calls ?? []) {
            const call = (calls[tc.index] ??= { id: "", name: "", arguments: "" });
            if (tc.id) call.id = tc.id;
            if (tc.function?.name) call.name += tc.function.name;
            if (tc.function?.arguments) call.arguments += tc.function.arguments;
          }
          if (choice.finish_reason) finishReason = choice.finish_reason;
        }
        if (chunk.usage) {
          usage.inputTokens = chunk.usage.prompt_tokens ?? 0;
          usage.outputTokens = chunk.usage.completion_tokens ?? 0;
        }
      },
    });
    try {
      const decoder = new TextDecoder();
      for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) parser.feed(decoder.decode(bytes as Uint8Array, { stream: true }));
    } catch (err) {
      return ctx.emit(ctx.signal.aborted ? failed("cancelled", "The job was cancelled.") : failed("runtime_error", `The stream from ${this.advert.name} broke: ${(err as Error).message}`));
    }
    if (malformed !== null) return ctx.emit(failed("runtime_error", `${this.advert.name} sent a chunk that is not JSON: ${malformed}`));
    calls.forEach((call, i) => ctx.emit({ type: "tool_call", id: call.id || `call_${i}`, name: call.name, arguments: call.arguments }));
    ctx.emit({ type: "done", finishReason, output, usage });
  }
}
