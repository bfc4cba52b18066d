// The Responses API's wire types (`POST /v1/responses` and the stored responses), as plain
// TypeScript: mirrored from the contract by hand, checked against it in wire.check.ts.

export type ResponseInputContent =
  | { type: "input_text"; text: string; [extra: string]: unknown }
  | { type: "input_image"; image_url?: string | null; file_id?: string | null; detail?: "low" | "high" | "auto" | null; [extra: string]: unknown }
  | { type: "output_text"; text: string; [extra: string]: unknown }
  | { type: string; [extra: string]: unknown };

/** An input item: a message (its `type` may be left out), a function call sent back, a function's output, or an item of a stored response by id. */
export type ResponseInputItem =
  | { type?: "message"; id?: string; role: "user" | "system" | "developer" | "assistant"; content: string | ResponseInputContent[]; status?: string; [extra: string]: unknown }
  | { type: "function_call"; id?: string; call_id: string; name: string; arguments: string; status?: string; [extra: string]: unknown }
  | { type: "function_call_output"; id?: string | null; call_id: string; output: string | ResponseInputContent[]; status?: string | null; [extra: string]: unknown }
  | { type: string; [extra: string]: unknown };

export interface ResponseFunctionTool {
  type: "function";
  name: string;
  description?: string | null;
  parameters?: Record<string, unknown> | null;
  strict?: boolean | null;
  [extra: string]: unknown;
}

/** The Responses request, plus the end user (`user`, or `safety_identifier`: one is required). */
export interface ResponseCreateParams {
  /** `auto`, `svc/echo`, or a `<runtime>/<model>` alias. */
  model: string;
  input: string | ResponseInputItem[];
  user?: string;
  safety_identifier?: string;
  instructions?: string | null;
  tools?: ({ type: string; [extra: string]: unknown } | ResponseFunctionTool)[] | null;
  tool_choice?: "auto" | "none" | "required" | { type: "function"; name: string; [extra: string]: unknown } | null;
  parallel_tool_calls?: boolean | null;
  stream?: boolean | null;
  store?: boolean | null;
  previous_response_id?: string | null;
  max_output_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  text?: { format?: { type: "text" | "json_schema" | "json_object"; name?: string; schema?: Record<string, unknown>; description?: string; strict?: boolean | null; [extra: string]: unknown }; verbosity?: string | null; [extra: string]: unknown } | null;
  reasoning?: { effort?: "none" | "minimal" | "low" | "medium" | "high" | "xhigh" | null; summary?: "auto" | "concise" | "detailed" | null; [extra: string]: unknown } | null;
  metadata?: Record<string, string> | null;
  prompt_cache_key?: string | null;
  background?: boolean | null;
  include?: string[] | null;
  truncation?: "auto" | "disabled" | null;
  stream_options?: unknown;
  [extra: string]: unknown;
}

export interface ResponseOutputText {
  type: "output_text";
  text: string;
  annotations: unknown[];
  logprobs: unknown[];
}
export type ItemStatus = "in_progress" | "completed" | "incomplete";
export interface ResponseOutputMessage {
  type: "message";
  id: string;
  status: ItemStatus;
  role: "assistant";
  content: ResponseOutputText[];
}
/** A call of one of the caller's function tools: run it, and send its output back as a `function_call_output` item. */
export interface ResponseFunctionCall {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: ItemStatus;
}
export type ResponseOutputItem = ResponseOutputMessage | ResponseFunctionCall;

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export type ResponseStatus = "completed" | "failed" | "in_progress" | "cancelled" | "queued" | "incomplete";

/** A response (the Open Responses `ResponseResource`). Its run is `run_` with the same suffix. */
export interface ResponseObject {
  id: string;
  object: "response";
  created_at: number;
  completed_at: number | null;
  status: ResponseStatus;
  error: { type: string; code: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  model: string;
  output: ResponseOutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  reasoning: { effort: string | null; summary: string | null };
  store: boolean;
  temperature: number;
  text: { format: { type: string; [extra: string]: unknown }; verbosity?: string };
  tool_choice?: unknown;
  tools: ResponseFunctionTool[];
  top_p: number;
  truncation: string;
  usage: ResponseUsage | null;
  user: string | null;
  safety_identifier: string | null;
  prompt_cache_key: string | null;
  metadata: Record<string, string>;
  background: boolean;
  service_tier: string;
  top_logprobs: number;
  presence_penalty: number;
  frequency_penalty: number;
}

type Whole<T extends string> = { type: T; sequence_number: number; response: ResponseObject };
type PartAt = { sequence_number: number; output_index: number; item_id: string; content_index: number };

/** One event of a streamed response, by `type` (`sequence_number` counts from 0). */
export type ResponseStreamEvent =
  | Whole<"response.created">
  | Whole<"response.in_progress">
  | { type: "response.output_item.added"; sequence_number: number; output_index: number; item: ResponseOutputItem }
  | ({ type: "response.content_part.added"; part: ResponseOutputText } & PartAt)
  | ({ type: "response.output_text.delta"; delta: string; logprobs: unknown[] } & PartAt)
  | ({ type: "response.output_text.done"; text: string; logprobs: unknown[] } & PartAt)
  | ({ type: "response.content_part.done"; part: ResponseOutputText } & PartAt)
  | { type: "response.function_call_arguments.delta"; sequence_number: number; output_index: number; item_id: string; delta: string }
  | { type: "response.function_call_arguments.done"; sequence_number: number; output_index: number; item_id: string; name: string; arguments: string }
  | { type: "response.output_item.done"; sequence_number: number; output_index: number; item: ResponseOutputItem }
  | Whole<"response.completed">
  | Whole<"response.incomplete">
  | Whole<"response.failed">
  | { type: "error"; sequence_number: number; code: string | null; message: string; param: string | null; error: { type: string; code: string | null; message: string; param: string | null } };

export interface ResponseDeleted {
  id: string;
  object: "response.deleted";
  deleted: true;
}

/** A stored input item: every item has an id. */
export type ResponseInputItemStored = { id: string; type: string; [extra: string]: unknown };
export interface ResponseInputItemList {
  object: "list";
  data: ResponseInputItemStored[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

export interface ResponseInputItemsParams {
  user?: string;
  after?: string;
  before?: string;
  limit?: number;
  order?: "asc" | "desc";
}
