import type { ChatMessage, ChatTool, CreateResponseRequest, ResponseFunctionTool, ResponseInputRole } from "@svc/contract";
import { ApiError } from "../errors.js";

/** An input item as kept with a stored response (and listed by `input_items`): every item has an id. */
export type StoredItem = { id: string; type: string } & Record<string, unknown>;

type Part = { type: string; text?: string; image_url?: string | null; file_id?: string | null; detail?: string | null; refusal?: string };
type RawItem = { type?: string; role?: string; content?: string | Part[]; call_id?: string; name?: string; arguments?: string; output?: string | Part[]; id?: string | null };

const bad = (message: string, param: string) => new ApiError("invalid_request", message, { param });

/**
 * The request's input as items, each with an id (the caller's, or one made
 * from the response's id): a string is one user message.
 */
export function inputItems(input: CreateResponseRequest["input"], suffix: string): StoredItem[] {
  const items: RawItem[] = typeof input === "string" ? [{ type: "message", role: "user", content: input }] : (input as RawItem[]);
  return items.map((raw, i) => {
    const param = `input[${i}]`;
    const type = raw.type ?? (raw.role ? "message" : "");
    if (type === "message") {
      const content = typeof raw.content === "string" ? [{ type: raw.role === "assistant" ? "output_text" : "input_text", text: raw.content }] : (raw.content ?? []);
      content.forEach((part, j) => checkPart(raw.role!, part, `${param}.content[${j}]`));
      return { id: raw.id || `msg_${suffix}_${i}`, type, role: raw.role!, status: "completed", content } as StoredItem;
    }
    if (type === "function_call") return { id: raw.id || `fc_${suffix}_${i}`, type, call_id: raw.call_id!, name: raw.name!, arguments: raw.arguments!, status: "completed" };
    if (type === "function_call_output") {
      const output = typeof raw.output === "string" ? raw.output : (raw.output ?? []).map((p) => p.text ?? "").join("");
      return { id: raw.id || `fco_${suffix}_${i}`, type, call_id: raw.call_id!, output, status: "completed" };
    }
    // A reasoning item sent back (the Agents SDK and the AI SDK send the model's ones again): nothing a runtime here takes back; kept, not sent.
    if (type === "reasoning") return { ...(raw as Record<string, unknown>), id: raw.id || `rs_${suffix}_${i}`, type };
    // An item of a stored response, by its id (the AI SDK sends earlier output this way): resolved by the service before anything runs.
    if (type === "item_reference") {
      if (typeof raw.id !== "string" || !raw.id) throw bad(`Invalid ${param}.id: an \`item_reference\` names the item's id.`, `${param}.id`);
      return { id: raw.id, type };
    }
    throw bad(`Invalid ${param}.type ${JSON.stringify(type)}: input items here are \`message\`, \`function_call\`, \`function_call_output\`, \`item_reference\` (and \`reasoning\`, which is kept but not sent).`, `${param}.type`);
  });
}

function checkPart(role: string, part: Part, param: string): void {
  const allowed = role === "assistant" ? ["output_text", "refusal"] : ["input_text", "input_image"];
  if (!allowed.includes(part.type)) throw bad(`Invalid ${param}.type ${JSON.stringify(part.type)}: a ${role} message's content parts here are ${allowed.map((t) => `\`${t}\``).join(" and ")}.`, `${param}.type`);
  if ((part.type === "input_text" || part.type === "output_text") && typeof part.text !== "string") throw bad(`Invalid ${param}.text: the text of the part is required.`, `${param}.text`);
  if (part.type === "input_image" && !part.image_url) throw bad(`Invalid ${param}: an \`input_image\` needs \`image_url\` (a URL or a data: URL); \`file_id\` is not supported here.`, `${param}.image_url`);
}

/** The request's tools as chat tools: only function tools; any other type is a 400 naming it. */
export function functionTools(tools: CreateResponseRequest["tools"]): ResponseFunctionTool[] {
  return (tools ?? []).map((tool, i) => {
    if (tool.type !== "function") {
      throw bad(`Invalid tools[${i}].type ${JSON.stringify(tool.type)}: only \`function\` tools are supported here (the caller runs them); built-in tools such as \`${tool.type}\` are not.`, `tools[${i}].type`);
    }
    const t = tool as ResponseFunctionTool;
    if (typeof t.name !== "string" || !t.name) throw bad(`Invalid tools[${i}].name: a function tool needs its name.`, `tools[${i}].name`);
    return { type: "function", name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null };
  });
}

export const toChatTools = (tools: ResponseFunctionTool[]): ChatTool[] =>
  tools.map((t) => ({ type: "function", function: { name: t.name, ...(t.description ? { description: t.description } : {}), ...(t.parameters ? { parameters: t.parameters } : {}), ...(t.strict != null ? { strict: t.strict } : {}) } }));

/** Stored items as the chat messages a model runtime takes: consecutive function calls become one assistant message. */
export function toChatMessages(items: StoredItem[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  for (const item of items) {
    if (item.type === "message") {
      const role = item.role as ResponseInputRole;
      const parts = item.content as Part[];
      if (role === "assistant") {
        messages.push({ role, content: parts.map((p) => p.text ?? p.refusal ?? "").join("") });
        continue;
      }
      const onlyText = parts.every((p) => p.type === "input_text");
      const content = onlyText
        ? parts.map((p) => p.text).join("")
        : parts.map((p) => (p.type === "input_text" ? { type: "text", text: p.text } : { type: "image_url", image_url: { url: p.image_url, ...(p.detail ? { detail: p.detail } : {}) } }));
      messages.push({ role, content } as ChatMessage);
    } else if (item.type === "function_call") {
      const call = { id: item.call_id as string, type: "function" as const, function: { name: item.name as string, arguments: item.arguments as string } };
      const last = messages.at(-1);
      if (last?.role === "assistant" && last.tool_calls && !last.content) last.tool_calls.push(call);
      else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (item.type === "function_call_output") {
      messages.push({ role: "tool", tool_call_id: item.call_id as string, content: item.output as string });
    }
  }
  return messages;
}

/** The text of a message item's parts (what `svc/echo` answers with, and counts). */
export const itemText = (item: StoredItem): string => ((item.content as Part[] | undefined) ?? []).map((p) => p.text ?? "").join("");

/** Whether any item carries an image. */
export const hasImage = (items: StoredItem[]): boolean => items.some((i) => i.type === "message" && (i.content as Part[]).some((p) => p.type === "input_image"));
