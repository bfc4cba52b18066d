import type { ChatMessage } from "@svc/contract";

/**
 * The GenAI semantic conventions' attribute names this service writes (the
 * OpenTelemetry GenAI conventions, `semantic-conventions-genai`, in development:
 * `@opentelemetry/semantic-conventions` marks them moved there, so they are
 * spelled here). Always the latest experimental version: this instrumentation is
 * new and has no older one to stay compatible with, so `OTEL_SEMCONV_STABILITY_OPT_IN`
 * (`gen_ai_latest_experimental`) changes nothing and is not read.
 */
export const GEN_AI = {
  operation: "gen_ai.operation.name",
  provider: "gen_ai.provider.name",
  conversation: "gen_ai.conversation.id",
  requestModel: "gen_ai.request.model",
  maxTokens: "gen_ai.request.max_tokens",
  temperature: "gen_ai.request.temperature",
  inputTokens: "gen_ai.usage.input_tokens",
  outputTokens: "gen_ai.usage.output_tokens",
  cacheRead: "gen_ai.usage.cache_read.input_tokens",
  cacheWrite: "gen_ai.usage.cache_creation.input_tokens",
  finishReasons: "gen_ai.response.finish_reasons",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  toolType: "gen_ai.tool.type",
  toolArguments: "gen_ai.tool.call.arguments",
  toolResult: "gen_ai.tool.call.result",
  inputMessages: "gen_ai.input.messages",
  outputMessages: "gen_ai.output.messages",
} as const;

/** Attributes that carry content: recorded only with the operator's opt-in, and never taken from a machine. */
export const CONTENT_ATTRIBUTES = new Set<string>([GEN_AI.inputMessages, GEN_AI.outputMessages, GEN_AI.toolArguments, GEN_AI.toolResult, "gen_ai.system_instructions", "gen_ai.tool.definitions", "gen_ai.prompt", "gen_ai.completion"]);

/** Content kept per text part, and messages kept per attribute (the last ones): a span stays a few tens of KiB at most. */
export const CONTENT_PART_CHARS = 4096;
export const CONTENT_MESSAGES = 32;

const cut = (text: string) => (text.length > CONTENT_PART_CHARS ? `${text.slice(0, CONTENT_PART_CHARS)}…[${text.length - CONTENT_PART_CHARS} more characters]` : text);

/** A value as an attribute: itself when small, else its JSON cut to size. */
export function boundedValue(value: unknown): unknown {
  if (typeof value === "string") return cut(value);
  const json = JSON.stringify(value) ?? "null";
  return json.length <= CONTENT_PART_CHARS ? value : cut(json);
}

type Part = { type: "text"; content: string } | { type: "tool_call"; id: string; name: string; arguments: unknown } | { type: "tool_call_response"; id: string; response: unknown };

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p === "object" && "text" in p && typeof p.text === "string" ? p.text : "")).join("");
  return "";
}

/** A conversation as `gen_ai.input.messages` (the conventions' input-messages schema), its last `CONTENT_MESSAGES` messages, each part cut to size. */
export function inputMessages(messages: ChatMessage[]): unknown[] {
  return messages.slice(-CONTENT_MESSAGES).map((m) => {
    const parts: Part[] = [];
    if (m.role === "tool") parts.push({ type: "tool_call_response", id: m.tool_call_id, response: cut(textOf(m.content)) });
    else {
      const text = textOf(m.content);
      if (text) parts.push({ type: "text", content: cut(text) });
      if (m.role === "assistant") for (const c of m.tool_calls ?? []) parts.push({ type: "tool_call", id: c.id, name: c.function.name, arguments: boundedValue(parseJson(c.function.arguments)) });
    }
    return { role: m.role === "developer" ? "system" : m.role, parts };
  });
}

/** A model's answer as `gen_ai.output.messages`: one assistant message with its text and tool calls, and why it stopped. */
export function outputMessages(text: string, calls: { id?: string; name: string; arguments: string }[], finishReason: string): unknown[] {
  const parts: Part[] = [];
  if (text) parts.push({ type: "text", content: cut(text) });
  for (const c of calls) parts.push({ type: "tool_call", id: c.id ?? "", name: c.name, arguments: boundedValue(parseJson(c.arguments)) });
  return [{ role: "assistant", parts, finish_reason: finishReason }];
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
