/**
 * The model runtime of bench/chat.ts, in a process of its own: an OpenAI-compatible
 * server (`GET /v1/models`, `POST /v1/chat/completions`) with two models.
 *
 *  - `instant`: answers at once ("Hello from the stand-in model." in 4 content chunks
 *    when streamed, usage last; one `chat.completion` otherwise);
 *  - `paced64`: 64 content chunks, the first at once and then one every 20 ms
 *    (on a fixed schedule from the request's arrival, so a late timer does not
 *    push the later chunks back), a finish chunk, the usage chunk, `[DONE]`.
 *
 * Prints its URL (without `/v1`), then serves until it is sent SIGTERM.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

const PACED_CHUNKS = 64;
const PACED_INTERVAL_MS = 20;
const MODELS = ["instant", "paced64"];
const INSTANT_PIECES = ["Hello ", "from the ", "stand-in ", "model."];

const server = http.createServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  if (req.method === "GET" && req.url === "/v1/models") return json(res, { object: "list", data: MODELS.map((id) => ({ id, object: "model", created: 1, owned_by: "local" })) });
  if (req.method !== "POST" || req.url !== "/v1/chat/completions") return json(res, { error: { message: "not found" } }, 404);
  const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { model: string; stream?: boolean };
  const base = { id: "chatcmpl-standin", object: "chat.completion.chunk", created: 1, model: body.model };
  const usage = { prompt_tokens: 12, completion_tokens: body.model === "paced64" ? PACED_CHUNKS : INSTANT_PIECES.length, total_tokens: 0 };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  if (body.model === "instant") {
    if (!body.stream) {
      return json(res, {
        id: "chatcmpl-standin",
        object: "chat.completion",
        created: 1,
        model: body.model,
        choices: [{ index: 0, message: { role: "assistant", content: INSTANT_PIECES.join("") }, finish_reason: "stop" }],
        usage,
      });
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    let out = `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`;
    for (const piece of INSTANT_PIECES) out += `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`;
    out += `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`;
    out += `data: ${JSON.stringify({ ...base, choices: [], usage })}\n\ndata: [DONE]\n\n`;
    return res.end(out);
  }
  if (body.model !== "paced64") return json(res, { error: { message: `no model ${body.model}` } }, 404);
  // Streamed whatever `stream` says: only the bench asks for this model.
  const started = performance.now();
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`);
  for (let i = 0; i < PACED_CHUNKS; i++) {
    const due = started + i * PACED_INTERVAL_MS - performance.now();
    if (due > 0) await new Promise((r) => setTimeout(r, due));
    if (res.destroyed) return;
    res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: `tok${i} ` }, finish_reason: null }] })}\n\n`);
  }
  res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`);
  res.end(`data: ${JSON.stringify({ ...base, choices: [], usage })}\n\ndata: [DONE]\n\n`);
});
server.keepAliveTimeout = 60_000;

function json(res: http.ServerResponse, body: unknown, status = 200) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
process.stdout.write(`http://127.0.0.1:${(server.address() as AddressInfo).port}\n`);
process.on("SIGTERM", () => (server.closeAllConnections(), server.close(() => process.exit(0))));
