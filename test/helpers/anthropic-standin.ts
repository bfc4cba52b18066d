import crypto from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A stand-in of the Anthropic Messages API (`POST /v1/messages`), streamed exactly
 * as Anthropic streams it (SSE `message_start` with its usage, cache tokens
 * included; `content_block_start` / `content_block_delta` (`text_delta`,
 * `input_json_delta`) / `content_block_stop`; `message_delta` with the stop reason
 * and output tokens; `message_stop`), so the real Claude Code CLI can run offline
 * against it. It answers anything else the CLI asks (`HEAD /`, token counts, ...)
 * and records every request.
 *
 * What it answers is scripted by markers in the latest user message that holds
 * text (the prompt), so one stand-in serves every test of a file:
 * - (none): a plain answer, `Hello from the stand-in Claude.`, in several deltas 40 ms apart;
 * - `[[say:TEXT]]`: answers TEXT instead;
 * - `[[slow]]`: a long answer, one delta every 50 ms (to cancel it midway);
 * - `[[tool:NAME {json}]]`: calls the offered tool whose name contains NAME (`weather`
 *   finds the app's `mcp__app__weather`) with that input (default `{}`);
 * - `[[bash:COMMAND]]`: calls `Bash` with that command; `[[read:PATH]]`: calls `Read` on PATH;
 * - tool markers are called one per model turn, in order; once all have their
 *   result it answers `The tool said: <result>` for each (joined by a space);
 * - `[[status:400]]`: answers every request with that HTTP error (Anthropic's error body);
 *   `[[status:529x1]]`: only the first N requests of this prompt, then answers normally
 *   (shows the CLI's retries; `retry-after: 0` keeps them quick);
 * - `[[fail-after:N:CODE]]`: the first N requests of this prompt are answered normally, every
 *   later one with that HTTP error (a run whose first turns used tokens, then failed);
 * - `[[usage:IN/OUT]]`: each answer reports IN input and OUT output tokens, no cache tokens
 *   (IN with `message_start`, OUT with `message_delta`, as Anthropic does).
 * - `[[window:UTIL]]`: the answer carries the subscription headers Claude Code reads on a claude.ai login
 *   (`anthropic-ratelimit-unified-*`): the 5-hour window at UTIL (0..1) used, `allowed_warning` past 0.9;
 *   `[[spent]]`: 429 with the 5-hour window `rejected`. Both reset at `UNIFIED_RESETS_AT` (a key login ignores them);
 * Markers hold no `]`. Every message reports usage `USAGE` (cache reads and writes included) unless `[[usage:…]]` says otherwise.
 */
export interface AnthropicStandIn {
  url: string;
  /** Every request received, in order. */
  requests: RecordedRequest[];
  /** The `POST /v1/messages` bodies only. */
  messages(): MessagesBody[];
  close(): Promise<void>;
}

export interface RecordedRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export interface MessagesBody {
  model: string;
  stream?: boolean;
  system?: unknown;
  messages: { role: string; content: string | Block[] }[];
  tools?: { name: string; description?: string; input_schema?: unknown }[];
  max_tokens?: number;
}

type Block = { type: string; text?: string; content?: unknown; tool_use_id?: string; is_error?: boolean };

/** The usage each answer reports (its input split as Anthropic splits it). */
export const USAGE = { input_tokens: 21, cache_creation_input_tokens: 1200, cache_read_input_tokens: 5400, output_tokens: 17 } as const;

export const DEFAULT_ANSWER = "Hello from the stand-in Claude.";

const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  529: "overloaded_error",
};

type Step = { kind: "tool"; match: (name: string) => boolean; fixed?: string; input: unknown };

export async function startAnthropicStandIn(): Promise<AnthropicStandIn> {
  const requests: RecordedRequest[] = [];
  /** Errors already answered per prompt (for `[[status:NxK]]`); requests seen per prompt (for `[[fail-after:N:CODE]]`, under `after:<prompt>`). */
  const failures = new Map<string, number>();

  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
    const pathname = new URL(req.url ?? "/", "http://x").pathname;
    if (req.method === "HEAD" || (req.method === "GET" && pathname === "/")) return void res.writeHead(200).end();
    if (req.method === "POST" && pathname === "/v1/messages/count_tokens") return json(res, 200, { input_tokens: USAGE.input_tokens });
    if (req.method !== "POST" || pathname !== "/v1/messages") return error(res, 404, `No route ${req.method} ${pathname} on the stand-in.`);
    let parsed: MessagesBody;
    try {
      parsed = JSON.parse(body) as MessagesBody;
    } catch {
      return error(res, 400, "The body is not JSON.");
    }
    await answer(parsed, res, failures);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    messages: () => requests.filter((r) => r.method === "POST" && r.url.startsWith("/v1/messages") && !r.url.includes("count_tokens")).map((r) => JSON.parse(r.body) as MessagesBody),
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

const blocksOf = (content: string | Block[]): Block[] => (typeof content === "string" ? [{ type: "text", text: content }] : content);
const textOfResult = (b: Block): string =>
  typeof b.content === "string" ? b.content : Array.isArray(b.content) ? (b.content as Block[]).map((c) => c.text ?? "").join("") : "";

/** The prompt the script is read from (the latest user text), and the tool results that came after it. */
function conversation(body: MessagesBody): { prompt: string; results: string[] } {
  let at = -1;
  for (let i = body.messages.length - 1; i >= 0 && at < 0; i--) {
    const m = body.messages[i];
    if (m.role === "user" && blocksOf(m.content).some((b) => b.type === "text" && /\S/.test(b.text ?? "") && !/^\s*<system-reminder>[\s\S]*<\/system-reminder>\s*$/.test(b.text ?? ""))) at = i;
  }
  if (at < 0) return { prompt: "", results: [] };
  const prompt = blocksOf(body.messages[at].content)
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("\n");
  const results = body.messages
    .slice(at + 1)
    .flatMap((m) => (m.role === "user" ? blocksOf(m.content) : []))
    .filter((b) => b.type === "tool_result")
    .map(textOfResult);
  return { prompt, results };
}

function stepsOf(prompt: string): Step[] {
  const steps: Step[] = [];
  for (const m of prompt.matchAll(/\[\[(tool|bash|read):([^\]]*?)\]\]/g)) {
    const [, kind, rest] = m;
    if (kind === "bash") steps.push({ kind: "tool", fixed: "Bash", match: (n) => n === "Bash", input: { command: rest, description: "Run a command for the test" } });
    else if (kind === "read") steps.push({ kind: "tool", fixed: "Read", match: (n) => n === "Read", input: { file_path: rest } });
    else {
      const space = rest.indexOf(" ");
      const name = space < 0 ? rest : rest.slice(0, space);
      const input = space < 0 ? {} : JSON.parse(rest.slice(space + 1));
      steps.push({ kind: "tool", match: (n) => n.includes(name), input });
    }
  }
  return steps;
}

/** When the `[[window:…]]` and `[[spent]]` windows reset (epoch seconds): three hours after this module loaded. */
export const UNIFIED_RESETS_AT = Math.floor(Date.now() / 1000) + 3 * 3600;
const unifiedHeaders = (status: string, utilization: number) => ({
  "anthropic-ratelimit-unified-status": status,
  "anthropic-ratelimit-unified-reset": String(UNIFIED_RESETS_AT),
  "anthropic-ratelimit-unified-representative-claim": "five_hour",
  "anthropic-ratelimit-unified-fallback": "available",
  "anthropic-ratelimit-unified-5h-status": status,
  "anthropic-ratelimit-unified-5h-utilization": String(utilization),
  "anthropic-ratelimit-unified-5h-reset": String(UNIFIED_RESETS_AT),
  "anthropic-ratelimit-unified-7d-utilization": "0.1",
  "anthropic-ratelimit-unified-7d-reset": String(UNIFIED_RESETS_AT + 86_400),
});

async function answer(body: MessagesBody, res: http.ServerResponse, failures: Map<string, number>): Promise<void> {
  const { prompt, results } = conversation(body);
  if (prompt.includes("[[spent]]")) {
    res.writeHead(429, { "content-type": "application/json", "request-id": `req_${crypto.randomBytes(12).toString("hex")}`, ...unifiedHeaders("rejected", 1) });
    return void res.end(JSON.stringify({ type: "error", error: { type: "rate_limit_error", message: "This request would exceed your account's rate limit. Please try again later." } }));
  }
  const window = /\[\[window:([\d.]+)\]\]/.exec(prompt);
  const extraHeaders = window ? unifiedHeaders(Number(window[1]) >= 0.9 ? "allowed_warning" : "allowed", Number(window[1])) : {};
  const status = /\[\[status:(\d{3})(?:x(\d+))?\]\]/.exec(prompt);
  if (status) {
    const code = Number(status[1]);
    const times = status[2] === undefined ? Infinity : Number(status[2]);
    const seen = failures.get(prompt) ?? 0;
    if (seen < times) {
      failures.set(prompt, seen + 1);
      return error(res, code, code === 400 ? "messages: the stand-in refuses this request" : code === 529 ? "Overloaded" : "Internal server error");
    }
  }
  const failAfter = /\[\[fail-after:(\d+):(\d{3})\]\]/.exec(prompt);
  if (failAfter) {
    const seen = failures.get(`after:${prompt}`) ?? 0;
    failures.set(`after:${prompt}`, seen + 1);
    const code = Number(failAfter[2]);
    if (seen >= Number(failAfter[1])) return error(res, code, code === 529 ? "Overloaded" : code === 400 ? "messages: the stand-in refuses this request" : "Internal server error");
  }
  const steps = stepsOf(prompt);
  const next = steps[results.length];
  const tool = next ? (body.tools ?? []).find((t) => next.match(t.name)) : undefined;
  const content: ({ type: "text"; text: string } | { type: "tool_use"; name: string; input: unknown })[] = [];
  if (next && tool) {
    content.push({ type: "tool_use", name: tool.name, input: next.input });
  } else {
    const say = /\[\[say:([^\]]*)\]\]/.exec(prompt)?.[1];
    const text = prompt.includes("[[slow]]") ? "word ".repeat(200).trim() : results.length ? results.map((r) => `The tool said: ${r}`).join(" ") : (say ?? DEFAULT_ANSWER);
    content.push({ type: "text", text });
  }
  // Text deltas come apart in time, as from a real model: the worker and the service merge what arrives within a few ms.
  const paced = prompt.includes("[[slow]]") ? 50 : 40;
  const message = { id: `msg_${crypto.randomBytes(12).toString("hex")}`, type: "message", role: "assistant", model: body.model };
  const stopReason = content.some((c) => c.type === "tool_use") ? "tool_use" : "end_turn";
  const withIds = content.map((c) => (c.type === "tool_use" ? { ...c, id: `toolu_${crypto.randomBytes(12).toString("hex")}` } : c));
  const own = /\[\[usage:(\d+)\/(\d+)\]\]/.exec(prompt);
  const usage = own ? { input_tokens: Number(own[1]), cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: Number(own[2]) } : USAGE;
  if (!body.stream) {
    return json(res, 200, { ...message, content: withIds, stop_reason: stopReason, stop_sequence: null, usage });
  }
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "request-id": `req_${crypto.randomBytes(12).toString("hex")}`, ...extraHeaders });
  const send = async (event: string, data: unknown, pause = 0) => {
    if (res.destroyed) return;
    res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    if (pause) await new Promise((r) => setTimeout(r, pause));
  };
  const { output_tokens, ...input } = usage;
  await send("message_start", { type: "message_start", message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...input, output_tokens: 1 } } });
  for (const [index, block] of withIds.entries()) {
    if (block.type === "text") {
      await send("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } });
      await send("ping", { type: "ping" });
      for (const piece of block.text.match(/[\s\S]{1,8}/g) ?? []) await send("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: piece } }, paced);
    } else {
      await send("content_block_start", { type: "content_block_start", index, content_block: { type: "tool_use", id: block.id, name: block.name, input: {} } });
      const args = JSON.stringify(block.input);
      await send("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: "" } });
      for (const piece of args.match(/[\s\S]{1,12}/g) ?? []) await send("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: piece } });
    }
    await send("content_block_stop", { type: "content_block_stop", index });
  }
  await send("message_delta", { type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens } });
  await send("message_stop", { type: "message_stop" });
  res.end();
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "request-id": `req_${crypto.randomBytes(12).toString("hex")}` });
  res.end(JSON.stringify(body));
}

/** An error as Anthropic sends one; `retry-after: 0` so the CLI's retries take no backoff. */
function error(res: http.ServerResponse, status: number, message: string): void {
  res.writeHead(status, { "content-type": "application/json", "retry-after": "0", "request-id": `req_${crypto.randomBytes(12).toString("hex")}`, ...(status === 529 ? { "x-should-retry": "true" } : {}) });
  res.end(JSON.stringify({ type: "error", error: { type: ERROR_TYPES[status] ?? "api_error", message } }));
}
