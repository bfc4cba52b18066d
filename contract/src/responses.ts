import { z } from "zod";
import { UserId } from "./common.js";

/*
 * The Responses API (`POST /v1/responses`), as the Open Responses specification
 * and OpenAI's Responses API define it for the fields both have. Requests are
 * lenient as OpenAI's are (unknown fields accepted and ignored; anything this
 * service cannot do is a 400 naming it); answers are exact.
 */

// ---- input ----

export const ResponseInputText = z.object({ type: z.literal("input_text"), text: z.string() }).passthrough();
export const ResponseInputImage = z
  .object({
    type: z.literal("input_image"),
    image_url: z.string().nullable().optional().describe("A URL or a `data:` URL of the image."),
    file_id: z.string().nullable().optional(),
    detail: z.enum(["low", "high", "auto"]).nullable().optional(),
  })
  .passthrough();
/** Text of an earlier answer sent back as input (an assistant message's content). */
export const ResponseOutputTextInput = z.object({ type: z.literal("output_text"), text: z.string() }).passthrough();
const InputContentPart = z
  .object({ type: z.string().min(1).max(64) })
  .passthrough()
  .describe("`input_text`, `input_image`, or (in an assistant message sent back) `output_text` / `refusal`; any other type is a 400 naming it.");

/** Who said a message of a response's input. */
export const ResponseInputRole = z.enum(["user", "system", "developer", "assistant"]);
export type ResponseInputRole = z.infer<typeof ResponseInputRole>;

export const ResponseInputMessage = z
  .object({
    type: z.literal("message").optional(),
    id: z.string().max(128).optional(),
    role: ResponseInputRole,
    content: z.union([z.string(), z.array(InputContentPart)]),
    status: z.string().optional(),
  })
  .passthrough();
export const ResponseFunctionCallInput = z
  .object({
    type: z.literal("function_call"),
    id: z.string().max(128).optional(),
    call_id: z.string().min(1).max(128),
    name: z.string().min(1).max(128),
    arguments: z.string(),
    status: z.string().optional(),
  })
  .passthrough();
export const ResponseFunctionCallOutputInput = z
  .object({
    type: z.literal("function_call_output"),
    id: z.string().max(128).nullable().optional(),
    call_id: z.string().min(1).max(128),
    output: z.union([z.string(), z.array(InputContentPart)]),
    status: z.string().nullable().optional(),
  })
  .passthrough();
/** Any other item type (`reasoning`, `item_reference`, ...): accepted by the schema, then taken or refused by name. */
const OtherInputItem = z.object({ type: z.string().min(1).max(64) }).passthrough();

export const ResponseInputItem = z.union([ResponseInputMessage, ResponseFunctionCallInput, ResponseFunctionCallOutputInput, OtherInputItem]);
export type ResponseInputItem = z.infer<typeof ResponseInputItem>;

export const ResponseFunctionTool = z
  .object({
    type: z.literal("function"),
    name: z.string().min(1).max(128),
    description: z.string().nullable().optional(),
    parameters: z.record(z.unknown()).nullable().optional(),
    strict: z.boolean().nullable().optional(),
  })
  .passthrough();
export type ResponseFunctionTool = z.infer<typeof ResponseFunctionTool>;
const ResponseToolInput = z
  .object({ type: z.string().min(1).max(64) })
  .passthrough()
  .describe("A `function` tool (`ResponseFunctionTool`); any other type (built-in tools: `web_search`, `file_search`, ...) is a 400 naming it.");

export const ResponseTextFormat = z
  .object({
    type: z.enum(["text", "json_schema", "json_object"]),
    name: z.string().max(128).optional(),
    schema: z.record(z.unknown()).optional(),
    description: z.string().optional(),
    strict: z.boolean().nullable().optional(),
  })
  .passthrough();

export const ResponseReasoning = z
  .object({
    effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh"]).nullable().optional(),
    summary: z.enum(["auto", "concise", "detailed"]).nullable().optional(),
  })
  .passthrough();

/** The Responses request, plus the end user (`user`, or `safety_identifier`: one is required here). Unknown fields are accepted and ignored. */
export const CreateResponseRequest = z
  .object({
    model: z.string().min(1).describe("`auto`, `svc/echo`, or a `<runtime>/<model>` alias."),
    input: z.union([z.string(), z.array(ResponseInputItem)]).describe("A user message as a string, or items: messages, `function_call` and `function_call_output`."),
    instructions: z.string().nullable().optional().describe("A system message put before the input (not carried over by `previous_response_id`)."),
    tools: z.array(ResponseToolInput).max(128).nullable().optional(),
    tool_choice: z
      .union([z.enum(["auto", "none", "required"]), z.object({ type: z.literal("function"), name: z.string() }).passthrough()])
      .nullable()
      .optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
    stream: z.boolean().nullable().optional(),
    store: z.boolean().nullable().optional().describe("Keep the response and its input for `previous_response_id` and `GET /v1/responses/{id}` (default true), for the retention the service states."),
    previous_response_id: z.string().max(64).nullable().optional().describe("A stored response of the same user whose input and output come before this input."),
    max_output_tokens: z.number().int().min(1).nullable().optional(),
    temperature: z.number().min(0).max(2).nullable().optional(),
    top_p: z.number().min(0).max(1).nullable().optional(),
    text: z.object({ format: ResponseTextFormat.optional(), verbosity: z.string().nullable().optional() }).passthrough().nullable().optional(),
    reasoning: ResponseReasoning.nullable().optional(),
    metadata: z.record(z.string().max(512)).nullable().optional().describe("Up to 16 string pairs, echoed on the response."),
    user: UserId.optional().describe("The end user the response is for: this or `safety_identifier` is REQUIRED here; when both are sent, `user` wins."),
    safety_identifier: UserId.optional().describe("OpenAI's name for the end user's id: taken as the end user when `user` is absent."),
    prompt_cache_key: z.string().max(256).nullable().optional(),
    background: z.boolean().nullable().optional().describe("Not supported: `true` is a 400."),
    include: z.array(z.string()).nullable().optional(),
    truncation: z.enum(["auto", "disabled"]).nullable().optional(),
    stream_options: z.unknown().optional(),
  })
  .passthrough();
export type CreateResponseRequest = z.infer<typeof CreateResponseRequest>;

// ---- output ----

export const ResponseOutputText = z.object({
  type: z.literal("output_text"),
  text: z.string(),
  annotations: z.array(z.unknown()),
  logprobs: z.array(z.unknown()),
});
export const ItemStatus = z.enum(["in_progress", "completed", "incomplete"]);
export const ResponseOutputMessage = z.object({
  type: z.literal("message"),
  id: z.string(),
  status: ItemStatus,
  role: z.literal("assistant"),
  content: z.array(ResponseOutputText),
});
export const ResponseFunctionCall = z.object({
  type: z.literal("function_call"),
  id: z.string(),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string().describe("The model's arguments as JSON text."),
  status: ItemStatus,
});
export const ResponseOutputItem = z.discriminatedUnion("type", [ResponseOutputMessage, ResponseFunctionCall]);
export type ResponseOutputItem = z.infer<typeof ResponseOutputItem>;

export const ResponseUsage = z.object({
  input_tokens: z.number().int(),
  input_tokens_details: z.object({ cached_tokens: z.number().int() }),
  output_tokens: z.number().int(),
  output_tokens_details: z.object({ reasoning_tokens: z.number().int() }),
  total_tokens: z.number().int(),
});

export const ResponseStatus = z.enum(["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]);

/** A response: what `POST /v1/responses` answers (without `stream`), and `GET /v1/responses/{id}`. */
export const ResponseObject = z.object({
  id: z.string().describe("`resp_...`; the run behind it is `run_` with the same suffix (`Service-Run-Id`)."),
  object: z.literal("response"),
  created_at: z.number().int(),
  completed_at: z.number().int().nullable(),
  status: ResponseStatus,
  error: z.object({ type: z.string(), code: z.string(), message: z.string() }).nullable().describe("Why the response failed: `type` and `code` as in the error envelope."),
  incomplete_details: z.object({ reason: z.string() }).nullable(),
  instructions: z.string().nullable(),
  max_output_tokens: z.number().int().nullable(),
  max_tool_calls: z.number().int().nullable(),
  model: z.string(),
  output: z.array(ResponseOutputItem),
  parallel_tool_calls: z.boolean(),
  previous_response_id: z.string().nullable(),
  reasoning: z.object({ effort: z.string().nullable(), summary: z.string().nullable() }),
  store: z.boolean(),
  temperature: z.number(),
  text: z.object({ format: z.object({ type: z.string() }).passthrough(), verbosity: z.string().optional() }),
  tool_choice: z.unknown(),
  tools: z.array(ResponseFunctionTool),
  top_p: z.number(),
  truncation: z.string(),
  usage: ResponseUsage.nullable(),
  user: z.string().nullable(),
  safety_identifier: z.string().nullable(),
  prompt_cache_key: z.string().nullable(),
  metadata: z.record(z.string()),
  background: z.boolean(),
  service_tier: z.string(),
  top_logprobs: z.number().int(),
  presence_penalty: z.number(),
  frequency_penalty: z.number(),
});
export type ResponseObject = z.infer<typeof ResponseObject>;

export const ResponseDeleted = z.object({ id: z.string(), object: z.literal("response.deleted"), deleted: z.literal(true) });

/** An input item as stored: every item has an id. */
export const ResponseInputItemStored = z.object({ id: z.string(), type: z.string() }).passthrough();
export const ResponseInputItemList = z.object({
  object: z.literal("list"),
  data: z.array(ResponseInputItemStored),
  first_id: z.string().nullable(),
  last_id: z.string().nullable(),
  has_more: z.boolean(),
});

export const ResponseIdParam = z.object({ id: z.string().min(1).max(64) });
export const ResponseReadQuery = z.object({
  user: UserId.optional().describe("The end user the response must belong to: another user's response is a 404, like an unknown id."),
});
export const ResponseInputItemsQuery = ResponseReadQuery.extend({
  after: z.string().max(128).optional().describe("An item id: the page starts after it."),
  before: z.string().max(128).optional().describe("An item id: the page ends before it."),
  limit: z.coerce.number().int().min(1).max(100).optional().describe("1 to 100 (default 20)."),
  order: z.enum(["asc", "desc"]).optional().describe("`desc` (default): the last item first."),
  include: z.union([z.string(), z.array(z.string())]).optional(),
});

// ---- stream events ----

const seq = { sequence_number: z.number().int().min(0) };
const whole = <T extends string>(type: T) => z.object({ type: z.literal(type), ...seq, response: ResponseObject });
const itemAt = { output_index: z.number().int(), item_id: z.string() };
const partAt = { ...itemAt, content_index: z.number().int() };

export const ResponseCreatedEvent = whole("response.created");
export const ResponseInProgressEvent = whole("response.in_progress");
export const ResponseCompletedEvent = whole("response.completed");
export const ResponseIncompleteEvent = whole("response.incomplete");
export const ResponseFailedEvent = whole("response.failed");
export const ResponseOutputItemAddedEvent = z.object({ type: z.literal("response.output_item.added"), ...seq, output_index: z.number().int(), item: ResponseOutputItem });
export const ResponseOutputItemDoneEvent = z.object({ type: z.literal("response.output_item.done"), ...seq, output_index: z.number().int(), item: ResponseOutputItem });
export const ResponseContentPartAddedEvent = z.object({ type: z.literal("response.content_part.added"), ...seq, ...partAt, part: ResponseOutputText });
export const ResponseContentPartDoneEvent = z.object({ type: z.literal("response.content_part.done"), ...seq, ...partAt, part: ResponseOutputText });
export const ResponseOutputTextDeltaEvent = z.object({ type: z.literal("response.output_text.delta"), ...seq, ...partAt, delta: z.string(), logprobs: z.array(z.unknown()) });
export const ResponseOutputTextDoneEvent = z.object({ type: z.literal("response.output_text.done"), ...seq, ...partAt, text: z.string(), logprobs: z.array(z.unknown()) });
export const ResponseFunctionCallArgumentsDeltaEvent = z.object({ type: z.literal("response.function_call_arguments.delta"), ...seq, ...itemAt, delta: z.string() });
export const ResponseFunctionCallArgumentsDoneEvent = z.object({ type: z.literal("response.function_call_arguments.done"), ...seq, ...itemAt, name: z.string(), arguments: z.string() });
/**
 * The stream itself failed before the response ended (a reader too slow for its buffer): the error
 * envelope's type, code and message, nested as Open Responses has them and flat as OpenAI sends them.
 */
export const ResponseErrorEvent = z.object({
  type: z.literal("error"),
  ...seq,
  code: z.string().nullable(),
  message: z.string(),
  param: z.string().nullable(),
  error: z.object({ type: z.string(), code: z.string().nullable(), message: z.string(), param: z.string().nullable() }),
});

/** One `data:` frame of a streamed response (`event:` is its `type`). */
export const ResponseStreamEvent = z.discriminatedUnion("type", [
  ResponseCreatedEvent,
  ResponseInProgressEvent,
  ResponseOutputItemAddedEvent,
  ResponseContentPartAddedEvent,
  ResponseOutputTextDeltaEvent,
  ResponseOutputTextDoneEvent,
  ResponseContentPartDoneEvent,
  ResponseFunctionCallArgumentsDeltaEvent,
  ResponseFunctionCallArgumentsDoneEvent,
  ResponseOutputItemDoneEvent,
  ResponseCompletedEvent,
  ResponseIncompleteEvent,
  ResponseFailedEvent,
  ResponseErrorEvent,
]);
export type ResponseStreamEvent = z.infer<typeof ResponseStreamEvent>;
