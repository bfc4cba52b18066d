import { expect } from "vitest";
import { z } from "zod";

/**
 * The Open Responses specification's answer shapes, written here from the
 * specification (its `ResponseResource`, output items and streaming events:
 * every field it requires, with its type and nullability), independently of
 * this service's contract, so a test checks the service against the
 * specification, not against itself.
 */

const nullable = <T extends z.ZodTypeAny>(t: T) => t.nullable();
const itemStatus = z.enum(["in_progress", "completed", "incomplete"]);
const outputText = z.object({ type: z.literal("output_text"), text: z.string(), annotations: z.array(z.unknown()), logprobs: z.array(z.unknown()).optional() });
const message = z.object({ type: z.literal("message"), id: z.string(), status: itemStatus, role: z.enum(["unknown", "user", "assistant", "system", "critic", "discriminator", "developer", "tool"]), content: z.array(z.object({ type: z.string() }).passthrough()) });
const functionCall = z.object({ type: z.literal("function_call"), id: z.string(), call_id: z.string(), name: z.string(), arguments: z.string(), status: itemStatus });
const functionCallOutput = z.object({ type: z.literal("function_call_output"), id: z.string(), call_id: z.string(), output: z.union([z.string(), z.array(z.unknown())]), status: itemStatus });
const reasoning = z.object({ type: z.literal("reasoning"), id: z.string(), summary: z.array(z.unknown()) });
const item = z.discriminatedUnion("type", [message, functionCall, functionCallOutput, reasoning]);
const functionTool = z.object({ type: z.literal("function"), name: z.string(), description: nullable(z.string()), parameters: nullable(z.record(z.unknown())), strict: nullable(z.boolean()) });
const usage = z.object({
  input_tokens: z.number().int(),
  output_tokens: z.number().int(),
  total_tokens: z.number().int(),
  input_tokens_details: z.object({ cached_tokens: z.number().int() }),
  output_tokens_details: z.object({ reasoning_tokens: z.number().int() }),
});
const textFormat = z.union([
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({ type: z.literal("json_schema"), name: z.string(), schema: z.unknown(), description: nullable(z.string()).optional(), strict: nullable(z.boolean()).optional() }),
]);
const toolChoice = z.union([z.enum(["none", "auto", "required"]), z.object({ type: z.literal("function"), name: z.string() }), z.object({ type: z.literal("allowed_tools"), tools: z.array(z.unknown()), mode: z.string() })]);

/** The specification's `ResponseResource`: all 31 required fields. */
export const ResponseResource = z.object({
  id: z.string(),
  object: z.literal("response"),
  created_at: z.number().int(),
  completed_at: nullable(z.number().int()),
  status: z.string(),
  incomplete_details: nullable(z.object({ reason: z.string() })),
  model: z.string(),
  previous_response_id: nullable(z.string()),
  instructions: nullable(z.union([z.string(), z.array(z.unknown())])),
  output: z.array(item),
  error: nullable(z.object({ code: z.string(), message: z.string() })),
  tools: z.array(functionTool),
  tool_choice: toolChoice,
  truncation: z.enum(["auto", "disabled"]),
  parallel_tool_calls: z.boolean(),
  text: z.object({ format: textFormat, verbosity: z.enum(["low", "medium", "high"]).optional() }),
  top_p: z.number(),
  presence_penalty: z.number(),
  frequency_penalty: z.number(),
  top_logprobs: z.number().int(),
  temperature: z.number(),
  reasoning: nullable(z.object({ effort: nullable(z.string()), summary: nullable(z.string()) })),
  usage: nullable(usage),
  max_output_tokens: nullable(z.number().int()),
  max_tool_calls: nullable(z.number().int()),
  store: z.boolean(),
  background: z.boolean(),
  service_tier: z.string(),
  metadata: z.unknown().refine((m) => m !== undefined, "metadata is required"),
  safety_identifier: nullable(z.string()),
  prompt_cache_key: nullable(z.string()),
});

const seq = { sequence_number: z.number().int() };
const withResponse = (type: string) => z.object({ type: z.literal(type), ...seq, response: ResponseResource });
const at = { item_id: z.string(), output_index: z.number().int() };
const part = z.union([outputText, z.object({ type: z.literal("refusal"), refusal: z.string() })]);

/** The specification's streaming events this service sends, by `type`. */
export const StreamingEvent = z.discriminatedUnion("type", [
  withResponse("response.created"),
  withResponse("response.queued"),
  withResponse("response.in_progress"),
  withResponse("response.completed"),
  withResponse("response.failed"),
  withResponse("response.incomplete"),
  z.object({ type: z.literal("response.output_item.added"), ...seq, output_index: z.number().int(), item: nullable(item) }),
  z.object({ type: z.literal("response.output_item.done"), ...seq, output_index: z.number().int(), item: nullable(item) }),
  z.object({ type: z.literal("response.content_part.added"), ...seq, ...at, content_index: z.number().int(), part }),
  z.object({ type: z.literal("response.content_part.done"), ...seq, ...at, content_index: z.number().int(), part }),
  z.object({ type: z.literal("response.output_text.delta"), ...seq, ...at, content_index: z.number().int(), delta: z.string(), logprobs: z.array(z.unknown()).optional() }),
  z.object({ type: z.literal("response.output_text.done"), ...seq, ...at, content_index: z.number().int(), text: z.string(), logprobs: z.array(z.unknown()).optional() }),
  z.object({ type: z.literal("response.function_call_arguments.delta"), ...seq, ...at, delta: z.string() }),
  z.object({ type: z.literal("response.function_call_arguments.done"), ...seq, ...at, arguments: z.string() }),
  z.object({ type: z.literal("error"), ...seq, error: z.object({ type: z.string(), code: nullable(z.string()), message: z.string(), param: nullable(z.string()) }) }),
]);

const problems = (r: z.SafeParseReturnType<unknown, unknown>) => (r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`));

/** A response object as the specification defines it. */
export function expectOpenResponse(value: unknown): void {
  expect(problems(ResponseResource.safeParse(value)), JSON.stringify(value).slice(0, 400)).toEqual([]);
}

/**
 * A whole stream as the specification defines it: each event valid,
 * `sequence_number` 0, 1, 2, ... in order, `response.created` first, one
 * terminal event last, every item and content part added before its deltas and
 * done after them, and the final response's output equal to the items done.
 */
export function expectOpenResponsesStream(events: unknown[]): void {
  for (const e of events) expect(problems(StreamingEvent.safeParse(e)), JSON.stringify(e).slice(0, 300)).toEqual([]);
  const typed = events as { type: string; sequence_number: number; output_index?: number; item?: { id: string }; item_id?: string; response?: { output: unknown[]; status: string } }[];
  expect(typed.map((e) => e.sequence_number)).toEqual(typed.map((_, i) => i));
  expect(typed[0].type).toBe("response.created");
  expect(typed[1].type).toBe("response.in_progress");
  const terminal = ["response.completed", "response.failed", "response.incomplete"];
  expect(terminal).toContain(typed.at(-1)!.type);
  expect(typed.slice(0, -1).filter((e) => terminal.includes(e.type))).toEqual([]);
  const open = new Map<number, string>();
  const done: unknown[] = [];
  for (const e of typed) {
    if (e.type === "response.output_item.added") {
      expect(open.has(e.output_index!), `item ${e.output_index} added twice`).toBe(false);
      expect(e.output_index).toBe(done.length + open.size);
      open.set(e.output_index!, e.item!.id);
    } else if (e.type === "response.output_item.done") {
      expect(open.get(e.output_index!), `item ${e.output_index} done before added`).toBe(e.item!.id);
      open.delete(e.output_index!);
      done.push(e.item);
    } else if (e.item_id !== undefined) {
      expect(open.get(e.output_index!), `${e.type} outside its item`).toBe(e.item_id);
    }
  }
  expect(open.size, "items never done").toBe(0);
  const final = typed.at(-1)!.response!;
  expectOpenResponse(final);
  expect(final.output).toEqual(done);
}
