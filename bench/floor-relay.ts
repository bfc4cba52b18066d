/**
 * The bare relay of the floor measures (bench/floor.ts, bench/chat.ts): a server that speaks
 * the app's side of the service (`POST /v1/runs` and its stream, tool results posted back,
 * `POST /v1/chat/completions` plain or streamed) and a WebSocket to one bare worker
 * (bench/floor-worker.ts), and does nothing else: no auth, no validation, no routing, no
 * record. What a path through it adds is what the processes and hops cost on this machine.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer, type WebSocket } from "ws";
import type { JobEvent } from "@svc/contract";
import type { Msg } from "./baseline-loop.js";
import { spawnNode, type Child } from "./lib.js";

/** One run at the relay: its SSE response, the transcript, the current turn's calls and answers. */
interface RelayRun {
  res: http.ServerResponse;
  messages: Msg[];
  text: string;
  calls: { id: string; name: string; arguments: string }[];
  answers: Msg[];
  turnDone: boolean;
}

/** One chat completion at the relay: its response, streamed or not, and its text so far. */
interface RelayChat {
  res: http.ServerResponse;
  stream: boolean;
  usage: boolean;
  model: string;
  text: string;
}

export interface FloorRelay {
  url: string;
  wsUrl: string;
  close(): Promise<void>;
}

const readBody = (req: http.IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    let text = "";
    req.setEncoding("utf8").on("data", (c: string) => (text += c)).once("end", () => resolve(text)).once("error", reject);
  });

/**
 * The relay; `store`, when given, is awaited where the service must have written before it
 * goes on on the run path (an answer before its 200 and its next turn; a tool call or the
 * run's end before it is relayed).
 */
export async function startFloorRelay(store: ((run: string) => Promise<void>) | null): Promise<FloorRelay> {
  const runs = new Map<string, RelayRun>();
  const chats = new Map<string, RelayChat>();
  let worker: WebSocket | null = null;
  let nextId = 0;
  const job = (id: string, messages: Msg[], model?: string) => worker!.send(JSON.stringify({ id, messages, model }));
  const sse = (run: RelayRun, event: string, data: unknown) => run.res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  const stored = (id: string) => (store ? store(id) : Promise.resolve());

  /** The next turn starts once the model's turn has ended and every call of it is answered. */
  const maybeNextTurn = (id: string, run: RelayRun) => {
    if (!run.turnDone || run.answers.length < run.calls.length) return;
    run.messages = [
      ...run.messages,
      { role: "assistant", content: run.text || null, tool_calls: run.calls.map((c) => ({ id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } })) },
      ...run.answers,
    ];
    Object.assign(run, { text: "", calls: [], answers: [], turnDone: false });
    job(id, run.messages);
  };

  const onRunEvent = async (id: string, run: RelayRun, e: JobEvent) => {
    if (e.type === "text_delta") run.text += e.text;
    else if (e.type === "tool_call") {
      run.calls.push({ id: e.id, name: e.name, arguments: e.arguments });
      await stored(id);
      sse(run, "tool_call", { callId: e.id, name: e.name, arguments: JSON.parse(e.arguments) });
    } else if (e.type === "done") {
      run.text ||= e.output;
      run.turnDone = true;
      if (run.calls.length > 0) return maybeNextTurn(id, run);
      await stored(id);
      sse(run, "run_completed", { output: run.text });
      run.res.end();
      runs.delete(id);
    } else if (e.type === "failed") {
      sse(run, "run_failed", e);
      run.res.end();
      runs.delete(id);
    }
  };

  const onChatEvent = (id: string, chat: RelayChat, e: JobEvent) => {
    const chunk = (body: object) => chat.res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1, model: chat.model, ...body })}\n\n`);
    if (e.type === "text_delta") {
      if (chat.stream) chunk({ choices: [{ index: 0, delta: { content: e.text }, finish_reason: null }] });
      else chat.text += e.text;
    } else if (e.type === "done") {
      const usage = { prompt_tokens: e.usage.inputTokens, completion_tokens: e.usage.outputTokens, total_tokens: e.usage.inputTokens + e.usage.outputTokens };
      if (chat.stream) {
        chunk({ choices: [{ index: 0, delta: {}, finish_reason: e.finishReason }] });
        if (chat.usage) chunk({ choices: [], usage });
        chat.res.end("data: [DONE]\n\n");
      } else {
        const message = { role: "assistant", content: chat.text || e.output };
        chat.res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id, object: "chat.completion", created: 1, model: chat.model, choices: [{ index: 0, message, finish_reason: e.finishReason }], usage }));
      }
      chats.delete(id);
    } else if (e.type === "failed") {
      if (chat.stream) chat.res.end(`data: ${JSON.stringify({ error: { message: e.message } })}\n\n`);
      else chat.res.writeHead(502, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: e.message } }));
      chats.delete(id);
    }
  };

  const server = http.createServer(async (req, res) => {
    const text = await readBody(req);
    const answer = /^\/v1\/runs\/([^/]+)\/tool_result$/.exec(req.url ?? "");
    if (req.method === "POST" && req.url === "/v1/runs") {
      const id = `floor_${++nextId}`;
      const run: RelayRun = { res, messages: [{ role: "user", content: (JSON.parse(text) as { prompt: string }).prompt }], text: "", calls: [], answers: [], turnDone: false };
      runs.set(id, run);
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "service-run-id": id });
      job(id, run.messages);
    } else if (req.method === "POST" && answer && runs.has(answer[1])) {
      const { callId, result } = JSON.parse(text) as { callId: string; result: unknown };
      await stored(answer[1]);
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
      const run = runs.get(answer[1])!;
      run.answers.push({ role: "tool", tool_call_id: callId, content: JSON.stringify(result) });
      maybeNextTurn(answer[1], run);
    } else if (req.method === "POST" && req.url === "/v1/chat/completions") {
      const body = JSON.parse(text) as { model: string; messages: Msg[]; stream?: boolean; stream_options?: { include_usage?: boolean } };
      const id = `chatcmpl-floor${++nextId}`;
      const chat: RelayChat = { res, stream: body.stream === true, usage: body.stream_options?.include_usage === true, model: body.model, text: "" };
      chats.set(id, chat);
      if (chat.stream) res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      job(id, body.messages, body.model);
    } else res.writeHead(404).end();
  });
  server.keepAliveTimeout = 60_000;
  const wss = new WebSocketServer({ server });
  wss.on("connection", (ws) => {
    worker = ws;
    ws.on("message", (data) => {
      const { id, e } = JSON.parse(String(data)) as { id: string; e: JobEvent };
      const run = runs.get(id);
      if (run) return void onRunEvent(id, run, e);
      const chat = chats.get(id);
      if (chat) onChatEvent(id, chat, e);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}`,
    close: () => new Promise<void>((r) => (wss.close(), server.closeAllConnections(), server.close(() => r()))),
  };
}

/** The bare worker (bench/floor-worker.ts) connected to `relay`, its model turns against `modelUrl`. */
export async function startFloorWorker(relay: FloorRelay, modelUrl: string): Promise<Child> {
  const worker = spawnNode(["--import", "tsx", "bench/floor-worker.ts", relay.wsUrl, modelUrl]);
  await worker.waitFor(/connected/);
  worker.quiet();
  return worker;
}
