import { z } from "zod";
import { UserId } from "./common.js";
import { ErrorBody } from "./errors.js";

const ContentPart = z
  .object({ type: z.string() })
  .passthrough()
  .describe("A content part (`text`, `image_url`, ...).");
const Content = z.union([z.string(), z.array(ContentPart)]);

const ToolCallOut = z.object({
  id: z.string(),
  type: z.literal("function"),
  function: z.object({ name: z.string(), arguments: z.string() }),
});
/** A tool call of an assistant message (the model's arguments as JSON text). */
export type ChatToolCall = z.infer<typeof ToolCallOut>;

export const ChatMessage = z.discriminatedUnion("role", [
  z.object({ role: z.literal("system"), content: Content, name: z.string().optional() }).passthrough(),
  z.object({ role: z.literal("developer"), content: Content, name: z.string().optional() }).passthrough(),
  z.object({ role: z.literal("user"), content: Content, name: z.string().optional() }).passthrough(),
  z
    .object({
      role: z.literal("assistant"),
      content: Content.nullable().optional(),
      name: z.string().optional(),
      tool_calls: z.array(ToolCallOut).optional(),
    })
    .passthrough(),
  z.object({ role: z.literal("tool"), content: Content, tool_call_id: z.string() }).passthrough(),
]);
export type ChatMessage = z.infer<typeof ChatMessage>;

export const ChatTool = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string(),
    description: z.string().optional(),
    parameters: z.record(z.unknown()).optional(),
    strict: z.boolean().nullable().optional(),
  }),
});
export type ChatTool = z.infer<typeof ChatTool>;

/** The standard chat-completions request, plus the end user (`user`, or `safety_identifier`: one is required here). Unknown fields are accepted and ignored. */
export const ChatCompletionRequest = z
  .object({
    model: z.string().min(1).describe("`auto`, `svc/echo`, or a `<runtime>/<model>` alias."),
    messages: z.array(ChatMessage).min(1),
    user: UserId.optional().describe("The end user the completion is for: this or `safety_identifier` is REQUIRED here; when both are sent, `user` wins."),
    safety_identifier: UserId.optional().describe("OpenAI's name for the end user's id (it replaces the deprecated `user`): taken as the end user when `user` is absent."),
    stream: z.boolean().nullable().optional(),
    stream_options: z.object({ include_usage: z.boolean().optional() }).nullable().optional(),
    tools: z.array(ChatTool).optional(),
    tool_choice: z.unknown().optional(),
    parallel_tool_calls: z.boolean().optional(),
    temperature: z.number().nullable().optional(),
    top_p: z.number().nullable().optional(),
    max_tokens: z.number().int().nullable().optional(),
    max_completion_tokens: z.number().int().nullable().optional(),
    stop: z.union([z.string(), z.array(z.string())]).nullable().optional(),
    n: z.number().int().nullable().optional(),
    seed: z.number().int().nullable().optional(),
    presence_penalty: z.number().nullable().optional(),
    frequency_penalty: z.number().nullable().optional(),
    response_format: z.unknown().optional(),
  })
  .passthrough();

/** Why a chat completion's choice ended. */
export const FinishReason = z.enum(["stop", "length", "tool_calls", "content_filter"]);
export type FinishReason = z.infer<typeof FinishReason>;

const Usage = z.object({ prompt_tokens: z.number().int(), completion_tokens: z.number().int(), total_tokens: z.number().int() });

export const ChatCompletion = z.object({
  id: z.string(),
  object: z.literal("chat.completion"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      message: z.object({
        role: z.literal("assistant"),
        content: z.string().nullable(),
        tool_calls: z.array(ToolCallOut).optional(),
      }),
      finish_reason: FinishReason.nullable(),
    }),
  ),
  usage: Usage.optional(),
});

/** One `data:` frame of a streamed completion; the stream ends with `data: [DONE]`. */
export const ChatCompletionChunk = z.object({
  id: z.string(),
  object: z.literal("chat.completion.chunk"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      delta: z.object({
        role: z.literal("assistant").optional(),
        content: z.string().nullable().optional(),
        tool_calls: z
          .array(
            z.object({
              index: z.number().int(),
              id: z.string().optional(),
              type: z.literal("function").optional(),
              function: z.object({ name: z.string().optional(), arguments: z.string().optional() }).optional(),
            }),
          )
          .optional(),
      }),
      finish_reason: FinishReason.nullable(),
    }),
  ),
  usage: Usage.nullable().optional(),
});

/**
 * One `data:` frame of a streamed chat completion (`stream: true`): a chunk, or, when the
 * completion fails after streaming began, the error envelope as its last frame (no `[DONE]` then).
 */
export const ChatCompletionStreamFrame = z.union([
  ChatCompletionChunk,
  z
    .object({
      error: ErrorBody.extend({
        code: z.string().describe("The run's failure code: the service's (an `Error` code such as `run_timeout`) or the runtime's own, relayed (`runtime_error`, `api_error_529`)."),
      }),
    })
    .describe("The error envelope as a stream's last frame: its code is the run's failure code."),
]);

export const ModelList = z.object({
  object: z.literal("list"),
  data: z.array(
    z.object({
      id: z.string(),
      object: z.literal("model"),
      created: z.number().int(),
      owned_by: z.string().describe("`svc` for service models, else the runtime serving it on the user's machine."),
    }),
  ),
});
