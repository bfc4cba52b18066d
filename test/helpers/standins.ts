import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import type { AddressInfo } from "node:net";

/**
 * Local stand-ins that speak the real formats over the real transport: a model
 * server with Ollama's and the OpenAI-compatible API (streaming and tool calls),
 * and `claude` / `codex` executables that write their documented stream-json (and
 * say the versions the real ones were tested with, or SVC_FAKE_CLAUDE_VERSION /
 * SVC_FAKE_CODEX_VERSION). The real CLIs are driven in agent-claude and agent-codex;
 * these fakes stay for what those cannot be made to do: a scripted permission
 * request in one exact shape, a CLI without `app-server` (the exec fallback), an
 * unsupported version.
 */

export interface ModelStandIn {
  url: string;
  /** Every chat request body received. */
  requests: Record<string, unknown>[];
  /** Chat requests being answered now, and the most there ever were at once. */
  inFlight: { now: number; max: number };
  /** Lets every answer held by "[hold]" go (and the ones that come later). */
  release(): void;
  close(): Promise<void>;
}

type Msg = { role: string; content?: unknown; tool_calls?: unknown };

/**
 * Answers like a small model: with tools offered and no tool result yet, it calls
 * the first tool (its arguments streamed in pieces); otherwise it says hello, or
 * what the last tool returned, in several chunks. Usage in the last chunk.
 */
export async function startModelStandIn(models = ["llama3.2:3b", "qwen2.5:7b"]): Promise<ModelStandIn> {
  const requests: Record<string, unknown>[] = [];
  const inFlight = { now: 0, max: 0 };
  let released = false;
  const held: (() => void)[] = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method === "GET" && req.url === "/api/tags") return json(res, { models: models.map((name) => ({ name, model: name, size: 1 })) });
    if (req.method === "GET" && req.url === "/v1/models") return json(res, { object: "list", data: models.map((id) => ({ id, object: "model", owned_by: "local" })) });
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") return json(res, { error: { message: "not found" } }, 404);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { model: string; messages: Msg[]; tools?: { function: { name: string } }[]; stream?: boolean };
    requests.push(body);
    inFlight.max = Math.max(inFlight.max, ++inFlight.now);
    res.on("close", () => inFlight.now--);
    const last = body.messages.at(-1)!;
    const base = { id: "chatcmpl-standin", object: "chat.completion.chunk", created: 1, model: body.model };
    const frames: unknown[] = [];
    // Tools are called one after another: the k-th tool once k results came back.
    const results = body.messages.filter((m) => m.role === "tool").length;
    const prompt = String(body.messages.find((m) => m.role === "user")?.content ?? "");
    if (body.tools?.length && results < body.tools.length) {
      const name = body.tools[results].function.name;
      frames.push({ ...base, choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name, arguments: "" } }] }, finish_reason: null }] });
      for (const piece of ['{"city":', '"Paris"}']) frames.push({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] }, finish_reason: null }] });
      frames.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] });
    } else {
      // "[slow]" in the prompt: a long answer, a piece every 50 ms (to cancel it midway).
      const text = prompt.includes("[slow]") ? "word ".repeat(200) : last.role === "tool" ? `The tool said: ${String(last.content)}` : "Hello from the stand-in model.";
      for (const piece of text.match(/.{1,8}/g)!) frames.push({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
      frames.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
    }
    // "[paced]": the same answer, a frame every 5 ms (streamed over a few tens of ms, as a fast local model does).
    const paced = prompt.includes("[slow]") ? 50 : prompt.includes("[paced]") ? 5 : 0;
    frames.push({ ...base, choices: [], usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } });
    // "[late]" in the prompt: each answer begins 30 ms late (a model thinking), so a turn outlasts a driver's short polls.
    if (prompt.includes("[late]")) await new Promise((r) => setTimeout(r, 30));
    // "[hold]" in the prompt: the answer waits for `release()` (a machine kept busy as long as a test needs).
    if (prompt.includes("[hold]") && !released) await new Promise<void>((r) => held.push(r));
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const f of frames) {
      if (res.destroyed) return;
      res.write(`data: ${JSON.stringify(f)}\n\n`);
      if (paced) await new Promise((r) => setTimeout(r, paced));
    }
    res.end("data: [DONE]\n\n");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    inFlight,
    release: () => {
      released = true;
      for (const go of held.splice(0)) go();
    },
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

function json(res: http.ServerResponse, body: unknown, status = 200) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

/**
 * `claude` that behaves like `claude -p --output-format stream-json --verbose
 * --input-format stream-json --permission-prompt-tool stdio`: reads the user
 * message, wants to run Bash, asks through a control_request, and reports the
 * answer and its working folder in the result.
 */
const FAKE_CLAUDE = `#!/usr/bin/env node
const readline = require("node:readline");
const out = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
const args = process.argv.slice(2);
if (args[0] === "--version") { console.log((process.env.SVC_FAKE_CLAUDE_VERSION || "2.1.197") + " (Claude Code)"); process.exit(0); }
for (const need of ["-p", "--output-format", "stream-json", "--verbose", "--input-format", "--permission-prompt-tool"]) {
  if (!args.includes(need)) { process.stderr.write("missing " + need + "\\n"); process.exit(2); }
}
const rl = readline.createInterface({ input: process.stdin });
let prompt = null;
rl.on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.type === "user" && prompt === null) {
    prompt = msg.message.content[0].text;
    out({ type: "system", subtype: "init", session_id: "s1", uuid: "u0", cwd: process.cwd(), model: "claude-test", tools: ["Bash"], permissionMode: "default", apiKeySource: "none", claude_code_version: "2.0.0" });
    out({ type: "some_new_kind", note: "ignored" });
    out({ type: "assistant", message: { id: "msg_1", model: "claude-test", content: [{ type: "text", text: "I will list the files." }, { type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } }], stop_reason: null, usage: {} }, parent_tool_use_id: null, session_id: "s1", uuid: "u1" });
    out({ type: "control_request", request_id: "req_1", request: { subtype: "can_use_tool", tool_name: "Bash", input: { command: "ls" }, tool_use_id: "toolu_1", description: "List files" } });
    return;
  }
  if (msg.type === "control_response" && msg.response.request_id === "req_1") {
    const r = msg.response.response;
    const text = r.behavior === "allow" ? "Ran ls in " + process.cwd() : "Not allowed: " + r.message;
    out({ type: "user", message: { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: r.behavior }] }, parent_tool_use_id: null, session_id: "s1", uuid: "u2" });
    out({ type: "assistant", message: { id: "msg_2", model: "claude-test", content: [{ type: "text", text }], stop_reason: "end_turn", usage: {} }, parent_tool_use_id: null, session_id: "s1", uuid: "u3" });
    out({ type: "result", subtype: "success", is_error: false, duration_ms: 5, num_turns: 2, result: text + " (prompt: " + prompt + ")", stop_reason: "end_turn", total_cost_usd: 0.001, usage: { input_tokens: 30, output_tokens: 11 }, permission_denials: [], session_id: "s1", uuid: "u4" });
  }
});
rl.on("close", () => process.exit(0));
`;

/** `codex` that behaves like `codex exec --json`: a command run, a message naming its folder, usage. */
const FAKE_CODEX = `#!/usr/bin/env node
const out = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
const args = process.argv.slice(2);
if (args[0] === "--version") { console.log("codex-cli " + (process.env.SVC_FAKE_CODEX_VERSION || "0.169.0")); process.exit(0); }
if (args[0] !== "exec" || !args.includes("--json")) { process.stderr.write("usage: codex exec --json <prompt>\\n"); process.exit(2); }
const prompt = args[args.length - 1];
out({ type: "thread.started", thread_id: "0199a213-81c0-7800-8aa1-bbab2a035a53" });
out({ type: "turn.started" });
out({ type: "item.started", item: { id: "item_1", type: "command_execution", command: "bash -lc ls", aggregated_output: "", status: "in_progress" } });
out({ type: "item.completed", item: { id: "item_1", type: "command_execution", command: "bash -lc ls", aggregated_output: "a.txt\\n", exit_code: 0, status: "completed" } });
out({ type: "item.completed", item: { id: "item_2", type: "agent_message", text: "Worked in " + process.cwd() + " on: " + prompt } });
out({ type: "turn.completed", usage: { input_tokens: 24, cached_input_tokens: 0, output_tokens: 9, reasoning_output_tokens: 0 } });
`;

/** A folder holding the fake `claude` and `codex`, to put first on PATH. */
export function writeFakeClis(dir: string): string {
  const bin = path.join(dir, "bin");
  fs.mkdirSync(bin, { recursive: true });
  fs.writeFileSync(path.join(bin, "claude"), FAKE_CLAUDE, { mode: 0o755 });
  fs.writeFileSync(path.join(bin, "codex"), FAKE_CODEX, { mode: 0o755 });
  return bin;
}
