import http from "node:http";
import https from "node:https";
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
 * How long a kept-alive connection to a runtime may sit unused before it is closed
 * here: under the 5 s idle timeout of Node's and cpp-httplib's servers (llama.cpp),
 * so a reused connection is rarely one the runtime is closing (a shorter
 * `Keep-Alive: timeout` hint from the runtime is honoured as well).
 */
const IDLE_CONNECTION_MS = 4_000;

/**
 * A model runtime spoken to through its OpenAI-compatible chat API (Ollama,
 * llama.cpp server, LM Studio and any compatible server all have one): one
 * streamed turn per job, text deltas relayed as they come, tool calls gathered
 * from their deltas and handed back whole.
 *
 * Requests go through `node:http(s)` with one keep-alive agent per runtime, so
 * turns reuse their connection to the runtime (no TCP handshake per turn); this
 * costs the worker about a third of the CPU of `fetch` per turn.
 */
export class OpenAICompatibleRuntime implements Runtime {
  private readonly endpoint: URL;
  private readonly client: typeof http | typeof https;
  private readonly agent: http.Agent;

  constructor(
    readonly advert: RuntimeAdvert,
    /** The server's base URL, without `/v1`. */
    baseUrl: string,
    private readonly apiKey?: string,
  ) {
    this.endpoint = new URL(`${baseUrl}/v1/chat/completions`);
    this.client = this.endpoint.protocol === "https:" ? https : http;
    // LIFO: the connection used last is reused first, so the others idle out instead of all being kept warm.
    this.agent = new this.client.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS, scheduling: "lifo" });
  }

  async run(job: Job, ctx: JobContext): Promise<void> {
    if (job.kind !== "model_turn") return ctx.emit(failed("unsupported_job", `${this.advert.name} runs model turns, not ${job.kind}.`));
    const body = JSON.stringify({
      model: job.model,
      messages: job.messages,
      ...(job.tools?.length ? { tools: job.tools } : {}),
      ...(job.maxTokens ? { max_tokens: job.maxTokens } : {}),
      ...(job.temperature !== undefined ? { temperature: job.temperature } : {}),
      ...(job.topP !== undefined ? { top_p: job.topP } : {}),
      ...(job.responseFormat ? { response_format: job.responseFormat } : {}),
      ...(job.reasoningEffort ? { reasoning_effort: job.reasoningEffort } : {}),
      ...(job.toolChoice ? { tool_choice: job.toolChoice } : {}),
      ...(job.parallelToolCalls !== undefined ? { parallel_tool_calls: job.parallelToolCalls } : {}),
      stream: true,
      stream_options: { include_usage: true },
    });
    let res: http.IncomingMessage;
    try {
      res = await this.post(body, ctx.signal);
    } catch (err) {
      return ctx.emit(ctx.signal.aborted ? failed("cancelled", "The job was cancelled.") : failed("runtime_unreachable", `${this.advert.name} did not answer: ${(err as Error).message}`));
    }
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      let text = "";
      try {
        res.setEncoding("utf8");
        for await (const piece of res) if (text.length < 500) text += piece as string;
      } catch {
        // what came is enough to say
      }
      return ctx.emit(failed("runtime_error", `${this.advert.name} answered ${status}: ${text.slice(0, 500)}`));
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
      // Decoded as UTF-8 across chunk boundaries (a character split between two reads stays whole).
      res.setEncoding("utf8");
      for await (const text of res) parser.feed(text as string);
    } catch (err) {
      return ctx.emit(ctx.signal.aborted ? failed("cancelled", "The job was cancelled.") : failed("runtime_error", `The stream from ${this.advert.name} broke: ${(err as Error).message}`));
    }
    if (malformed !== null) return ctx.emit(failed("runtime_error", `${this.advert.name} sent a chunk that is not JSON: ${malformed}`));
    calls.forEach((call, i) => ctx.emit({ type: "tool_call", id: call.id || `call_${i}`, name: call.name, arguments: call.arguments }));
    ctx.emit({ type: "done", finishReason, output, usage });
  }

  /**
   * POSTs a turn on a kept-alive connection. A reused connection reset before any
   * answer came is tried once more on a new one: that is the runtime closing an idle
   * connection just as it was picked (the race every keep-alive client has).
   */
  private post(body: string, signal: AbortSignal, again = true): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      const req = this.client.request(this.endpoint, {
        method: "POST",
        agent: this.agent,
        signal,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}) },
      });
      let answered = false;
      req.on("response", (res) => ((answered = true), resolve(res)));
      req.on("error", (err: NodeJS.ErrnoException) => {
        if (again && !answered && req.reusedSocket && err.code === "ECONNRESET" && !signal.aborted) resolve(this.post(body, signal, false));
        else reject(err);
      });
      req.end(body);
    });
  }
}
