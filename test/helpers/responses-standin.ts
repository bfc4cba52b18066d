import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A stand-in of the OpenAI Responses API (`POST /v1/responses`, streamed as
 * OpenAI streams it: `response.created`, `response.output_item.added`,
 * `response.output_text.delta`, `response.output_item.done`, `response.completed`
 * with usage, cached tokens included), for driving the real Codex CLI offline.
 * What it answers is scripted by markers in the conversation's latest user text that has any (a follow-up
 * run's prompt without markers goes on with the earlier prompt's script, all its steps done):
 *
 * - several markers: one per model turn, in the order written (the next once the last has its output);
 * - `[tool:<name>]`: calls the first offered tool whose name contains `<name>`
 *   (MCP tools too, inside their namespace), then answers with what it returned;
 * - `[shell:<command>]`: runs `<command>` through Codex's shell tool, then answers with its output;
 * - `[escalate:<command>]`: the same, asking to run it outside Codex's sandbox (which asks the user's approval first
 *   where Codex has a sandbox of its own; inside the worker's, it has none and nothing is asked);
 * - `[error:<status>]`: answers that HTTP status in OpenAI's error format;
 * - `[slow]`: a long answer, one delta every 50 ms;
 * - `[window:<used>]`: Codex's rate limit headers on the answer (`x-codex-primary-*`: `<used>` percent of a
 *   300-minute window, `x-codex-secondary-*`: 12 % of a 7-day one, both resetting at `WINDOW_RESETS_AT`);
 * - `[spent]`: the 5-hour window spent: 429 with OpenAI's `usage_limit_reached` error and the headers at 100 %;
 * - otherwise: "Hello from the Responses stand-in." in a few deltas, 40 ms apart.
 */
export interface ResponsesStandIn {
  url: string;
  /** Every request body received. */
  requests: Record<string, unknown>[];
  close(): Promise<void>;
}

type Item = { type?: string; role?: string; content?: unknown; name?: string; namespace?: string; call_id?: string; output?: unknown; tools?: Item[] };

/** When the windows `[window:...]` and `[spent]` report reset (epoch seconds): three hours after the stand-in's module loaded. */
export const WINDOW_RESETS_AT = Math.floor(Date.now() / 1000) + 3 * 3600;
const windowHeaders = (used: number) => ({
  "x-codex-primary-used-percent": String(used),
  "x-codex-primary-window-minutes": "300",
  "x-codex-primary-reset-at": String(WINDOW_RESETS_AT),
  "x-codex-secondary-used-percent": "12",
  "x-codex-secondary-window-minutes": "10080",
  "x-codex-secondary-reset-at": String(WINDOW_RESETS_AT + 86_400),
});

const MARKER = /\[(tool|shell|escalate|error|slow|window|spent)/;

export const RESPONSES_USAGE = { input_tokens: 1200, cached_tokens: 1000, output_tokens: 40, reasoning_tokens: 8 };

export async function startResponsesStandIn(): Promise<ResponsesStandIn> {
  const requests: Record<string, unknown>[] = [];
  let seq = 0;
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method === "GET" && req.url?.startsWith("/v1/models")) return json(res, 200, { object: "list", data: [{ id: "standin-model", object: "model" }] });
    if (req.method !== "POST" || !req.url?.startsWith("/v1/responses")) return json(res, 404, { error: { message: "not found", type: "invalid_request_error" } });
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { input?: Item[]; tools?: Item[] };
    requests.push(body);
    const input = body.input ?? [];
    // The script: the latest user text with a marker (a follow-up's own prompt, once it has markers); its steps count the outputs after it.
    const texts = (i: Item) => (Array.isArray(i.content) ? (i.content as { text?: string }[]).map((c) => c.text ?? "") : [String(i.content ?? "")]);
    const at = input.findLastIndex((i) => i.role === "user" && texts(i).some((t) => MARKER.test(t)));
    const prompt = at < 0 ? "" : (texts(input[at]).find((t) => MARKER.test(t)) ?? "");
    const outputs = input.slice(at + 1).filter((i) => i.type === "function_call_output" || i.type === "custom_tool_call_output");
    const id = `resp_${++seq}`;

    const error = /\[error:(\d{3})\]/.exec(prompt);
    if (error) return json(res, Number(error[1]), { error: { message: `The stand-in refused this request (${error[1]}).`, type: "invalid_request_error", param: null, code: null } });

    if (prompt.includes("[spent]")) {
      res.writeHead(429, { "content-type": "application/json", ...windowHeaders(100), "x-codex-rate-limit-reached-type": "rate_limit_reached" });
      return res.end(JSON.stringify({ error: { type: "usage_limit_reached", message: "The usage limit has been reached", plan_type: "plus", resets_at: WINDOW_RESETS_AT } }));
    }
    const used = /\[window:(\d+)\]/.exec(prompt);
    res.writeHead(200, { "content-type": "text/event-stream", ...(used ? windowHeaders(Number(used[1])) : {}) });
    const send = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
    send("response.created", { response: { id, object: "response", status: "in_progress", output: [] } });
    const out: unknown[] = [];

    // The markers in the order written, one per model turn: the next is the first without its output yet.
    const steps = [...prompt.matchAll(/\[(tool|shell|escalate):([^\]]+)\]/g)].map((m) => ({ kind: m[1], what: m[2] }));
    const step = steps[outputs.length];
    if (step) {
      const toolWanted = step.kind === "tool" ? step.what : undefined;
      const call = toolWanted ? findTool(body.tools ?? [], toolWanted) : { name: shellToolOf(body.tools ?? []) };
      const args = toolWanted ? { id: "42" } : shellArgs(call.name, step.what, step.kind === "escalate");
      const item = { type: "function_call", id: `fc_${seq}`, call_id: `call_${seq}`, name: call.name, ...(call.namespace ? { namespace: call.namespace } : {}), arguments: JSON.stringify(args), status: "completed" };
      send("response.output_item.added", { output_index: 0, item: { ...item, arguments: "" } });
      send("response.function_call_arguments.delta", { item_id: item.id, output_index: 0, delta: item.arguments });
      send("response.output_item.done", { output_index: 0, item });
      out.push(item);
    } else {
      const last = outputs.at(-1);
      const text = prompt.includes("[slow]")
        ? "word ".repeat(100)
        : last
          ? `The tool said: ${typeof last.output === "string" ? last.output : JSON.stringify(last.output)}`
          : "Hello from the Responses stand-in.";
      const msgId = `msg_${seq}`;
      send("response.output_item.added", { output_index: 0, item: { type: "message", id: msgId, role: "assistant", status: "in_progress", content: [] } });
      send("response.content_part.added", { item_id: msgId, output_index: 0, content_index: 0, part: { type: "output_text", text: "" } });
      for (const piece of text.match(/[\s\S]{1,10}/g)!) {
        if (res.destroyed) return;
        send("response.output_text.delta", { item_id: msgId, output_index: 0, content_index: 0, delta: piece });
        // Paced, so the deltas are not merged on their way (the worker and the service merge deltas within 20-25 ms).
        await new Promise((r) => setTimeout(r, prompt.includes("[slow]") ? 50 : 40));
      }
      const item = { type: "message", id: msgId, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] };
      send("response.output_text.done", { item_id: msgId, output_index: 0, content_index: 0, text });
      send("response.output_item.done", { output_index: 0, item });
      out.push(item);
    }
    const u = RESPONSES_USAGE;
    send("response.completed", {
      response: {
        id,
        object: "response",
        status: "completed",
        output: out,
        usage: { input_tokens: u.input_tokens, input_tokens_details: { cached_tokens: u.cached_tokens }, output_tokens: u.output_tokens, output_tokens_details: { reasoning_tokens: u.reasoning_tokens }, total_tokens: u.input_tokens + u.output_tokens },
      },
    });
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
  };
}

/** The offered tool whose name contains `wanted`: a plain function tool, or one inside a namespace tool (how Codex offers MCP tools). */
function findTool(tools: Item[], wanted: string): { name: string; namespace?: string } {
  for (const t of tools) {
    if (t.type === "namespace" || Array.isArray(t.tools)) {
      const inner = (t.tools ?? []).find((x) => x.name?.includes(wanted));
      if (inner) return { name: inner.name!, namespace: t.name };
    }
    if (t.name?.includes(wanted)) return { name: t.name };
  }
  return { name: wanted };
}

/** The name of the shell tool Codex offered. */
function shellToolOf(tools: Item[]): string {
  const names = tools.map((t) => t.name ?? "");
  return names.find((n) => n === "exec_command") ?? names.find((n) => n === "shell") ?? names.find((n) => n === "shell_command") ?? "shell";
}

function shellArgs(tool: string, command: string, escalate: boolean): Record<string, unknown> {
  if (tool === "exec_command") return { cmd: command, ...(escalate ? { sandbox_permissions: "require_escalated", justification: "It writes outside the working folder." } : {}) };
  if (tool === "shell_command") return { command };
  return { command: ["bash", "-lc", command] };
}

function json(res: http.ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}
