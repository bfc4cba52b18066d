import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { APICallError, RetryError, generateText, stepCountIs, streamText, tool as aiTool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { AIMessage, AIMessageChunk, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool as lcTool } from "@langchain/core/tools";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";

/**
 * Chat completions with two more clients nobody here wrote, pointed at the real
 * server on each database: the Vercel AI SDK (`ai` with
 * `@ai-sdk/openai-compatible`) and LangChain's `ChatOpenAI`. `auto` goes to a real
 * worker process serving the model stand-in; a second user's worker serves a
 * runtime that breaks mid-answer, for the errors after streaming began.
 */

const HELLO = "Hello from the stand-in model.";
const USAGE_12_7 = { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 };

/** A model runtime that lists one model, then answers every chat with two chunks and drops the connection. */
interface BrittleStandIn {
  url: string;
  chats: number;
  close(): Promise<void>;
}

async function startBrittleStandIn(): Promise<BrittleStandIn> {
  const state = { chats: 0 };
  const server = http.createServer(async (req, res) => {
    for await (const _ of req) void _;
    if (req.method === "GET" && req.url === "/api/tags") {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify({ models: [{ name: "brittle:1b", model: "brittle:1b", size: 1 }] }));
    }
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
      res.writeHead(404, { "content-type": "application/json" });
      return res.end(JSON.stringify({ error: { message: "not found" } }));
    }
    state.chats++;
    res.writeHead(200, { "content-type": "text/event-stream" });
    const base = { id: "chatcmpl-brittle", object: "chat.completion.chunk", created: 1, model: "brittle:1b" };
    for (const piece of ["Half an ", "answer"]) res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`);
    // The runtime dies mid-answer: no finish chunk, no [DONE], the connection is cut.
    setTimeout(() => res.socket?.destroy(), 150);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get chats() {
      return state.chats;
    },
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

/** The raw `data:` payloads of an SSE body, in order (`[DONE]` as the string). */
function sseData(body: string): (Record<string, unknown> | "[DONE]")[] {
  return body
    .split("\n\n")
    .map((frame) => frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n"))
    .filter(Boolean)
    .map((d) => (d === "[DONE]" ? "[DONE]" : (JSON.parse(d) as Record<string, unknown>)));
}

onEachDatabase("chat completions with the Vercel AI SDK and LangChain on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let brittle: BrittleStandIn;
  let alice: WorkerProcess;
  let bob: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    model = await startModelStandIn();
    brittle = await startBrittleStandIn();
    const a = await pairViaApi(server, server.dev, "alice", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false } });
    const b = await pairViaApi(server, server.dev, "bob", { runtimes: { ollama: brittle.url, llamacpp: false, lmstudio: false } }, "bobs-machine");
    alice = spawnWorker(["start"], a.home);
    bob = spawnWorker(["start"], b.home);
    await Promise.all([alice.waitFor(/Connected/), bob.waitFor(/Connected/)]);
  }, 60_000);
  afterAll(async () => {
    alice?.stop();
    bob?.stop();
    await server?.close();
    await model?.close();
    await brittle?.close();
    removeTempDirs();
  });

  const runsOf = async (externalId: string) => server.db.prisma.run.findMany({ where: { endUser: { externalId } }, include: { usageRows: true }, orderBy: { createdAt: "asc" } });
  const runCount = (externalId: string) => server.db.prisma.run.count({ where: { endUser: { externalId } } });
  /** How many chat-completion requests the server answered with `status` (from its request log lines). */
  const answered = (status: number) =>
    server.logs
      .map((l) => JSON.parse(l) as { msg?: string; path?: string; status?: number })
      .filter((l) => l.msg === "request" && l.path === "/v1/chat/completions" && l.status === status).length;

  describe("the Vercel AI SDK (ai + @ai-sdk/openai-compatible)", () => {
    const provider = () => createOpenAICompatible({ name: "svc", baseURL: `${server.url}/v1`, apiKey: server.dev.appKey, includeUsage: true });
    // `user` is a documented provider option of the OpenAI-compatible chat model, keyed by the provider's name.
    const as = (user: string) => ({ svc: { user } });

    it("generateText and streamText on svc/echo: the exact text, usage, the run id header, and `user` sent as the provider option", async () => {
      const svc = provider();
      const before = await runCount("eve");
      // ai 7 keeps the request body in the result only when asked (`include.requestBody`).
      const plain = await generateText({ model: svc("svc/echo"), providerOptions: as("eve"), system: "be brief", prompt: "hello there", include: { requestBody: true } });
      expect(plain.text).toBe("hello there");
      expect(plain.finishReason).toBe("stop");
      expect(plain.usage.inputTokens).toBe(4); // "be brief" + "hello there"
      expect(plain.usage.outputTokens).toBe(2);
      expect(plain.response.headers?.["service-run-id"]).toMatch(/^run_/);
      const sent = plain.request.body;
      expect(typeof sent === "string" ? sent : JSON.stringify(sent ?? "")).toContain('"user":"eve"');

      const streamed = streamText({ model: svc("svc/echo"), providerOptions: as("eve"), prompt: "one two three" });
      const pieces: string[] = [];
      for await (const t of streamed.textStream) pieces.push(t);
      expect(pieces.length).toBeGreaterThan(1);
      expect(pieces.join("")).toBe("one two three");
      expect(await streamed.text).toBe("one two three");
      expect(await streamed.finishReason).toBe("stop");
      const usage = await streamed.usage;
      expect([usage.inputTokens, usage.outputTokens, usage.totalTokens]).toEqual([3, 3, 6]);
      expect(await runCount("eve")).toBe(before + 2);
    });

    it("@ai-sdk/openai's chat model (`openai.chat`; its default model speaks the Responses API): the exact text and usage, streamed too, one run each for the user", async () => {
      const openai = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: server.dev.appKey });
      const before = await runCount("olga");
      const plain = await generateText({ model: openai.chat("svc/echo"), providerOptions: { openai: { user: "olga" } }, prompt: "hello from ai 7" });
      expect(plain.text).toBe("hello from ai 7");
      expect(plain.usage.outputTokens).toBe(4); // svc/echo counts words
      const streamed = streamText({ model: openai.chat("svc/echo"), providerOptions: { openai: { user: "olga" } }, prompt: "one two three" });
      let text = "";
      for await (const t of streamed.textStream) text += t;
      expect(text).toBe("one two three");
      expect(await runCount("olga")).toBe(before + 2);
    });

    it("generateText and streamText on auto reach the user's runtime: the stand-in's text and usage, one run each", async () => {
      const svc = provider();
      const before = await runCount("alice");
      const sent = model.requests.length;
      const plain = await generateText({ model: svc("auto"), providerOptions: as("alice"), prompt: "hi" });
      expect(plain.text).toBe(HELLO);
      expect(plain.response.modelId).toBe("llama3.2:3b");
      expect([plain.usage.inputTokens, plain.usage.outputTokens]).toEqual([12, 7]);

      const streamed = streamText({ model: svc("ollama/llama3.2:3b"), providerOptions: as("alice"), prompt: "hi" });
      let text = "";
      for await (const t of streamed.textStream) text += t;
      expect(text).toBe(HELLO);
      const usage = await streamed.usage;
      expect([usage.inputTokens, usage.outputTokens]).toEqual([12, 7]);
      expect(await runCount("alice")).toBe(before + 2);
      expect(model.requests.length).toBe(sent + 2);
    });

    it("runs the tool loop itself: the SDK calls the tool with the model's arguments, sends the result back, gets the stand-in's answer", async () => {
      const svc = provider();
      const calls: unknown[] = [];
      const weather = aiTool({
        description: "The weather in a city",
        inputSchema: z.object({ city: z.string() }),
        execute: async (input) => {
          calls.push(input);
          return "sunny";
        },
      });
      for (const mode of ["generate", "stream"] as const) {
        calls.length = 0;
        const before = await runCount("alice");
        const sent = model.requests.length;
        const options = { model: svc("auto"), providerOptions: as("alice"), prompt: "weather?", tools: { weather }, stopWhen: stepCountIs(5) };
        let text: string;
        let steps: { finishReason: string; toolCalls: { toolName: string; input: unknown }[] }[];
        if (mode === "generate") {
          const r = await generateText(options);
          text = r.text;
          steps = r.steps;
        } else {
          const r = streamText(options);
          text = await r.text;
          steps = await r.steps;
        }
        expect(calls, mode).toEqual([{ city: "Paris" }]);
        expect(steps.map((s) => s.finishReason), mode).toEqual(["tool-calls", "stop"]);
        expect(steps[0].toolCalls.map((c) => [c.toolName, c.input]), mode).toEqual([["weather", { city: "Paris" }]]);
        expect(text, mode).toBe("The tool said: sunny");
        // Two model turns, two runs; the second carried the SDK's tool result back with the model's call id.
        expect(await runCount("alice"), mode).toBe(before + 2);
        const second = model.requests[sent + 1] as { messages: { role: string; content?: unknown; tool_call_id?: string; tool_calls?: { id: string; function: { name: string; arguments: string } }[] }[] };
        expect(model.requests.length, mode).toBe(sent + 2);
        expect(second.messages.map((m) => m.role), mode).toEqual(["user", "assistant", "tool"]);
        expect(second.messages[1].tool_calls?.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]), mode).toEqual([["call_1", "weather", { city: "Paris" }]]);
        expect(second.messages[2], mode).toMatchObject({ role: "tool", tool_call_id: "call_1", content: "sunny" });
      }
    });

    it("the 409 handback surfaces as an APICallError with status 409 and the envelope's code and message; its retries with one Idempotency-Key are counted once", async () => {
      const svc = provider();
      // With retries off: one request, the error itself.
      const handled = answered(409);
      const err = await generateText({ model: svc("auto"), providerOptions: as("ai-nobody"), prompt: "hi", maxRetries: 0 }).catch((e: unknown) => e);
      expect(APICallError.isInstance(err)).toBe(true);
      const e = err as APICallError;
      expect(e.statusCode).toBe(409);
      expect(e.message).toMatch(/has no reachable model runtime for model \S+: .*; serve this completion/);
      expect((e.data as { error: { code: string; type: string } }).error.code).toBe("serve_in_app");
      expect(e.responseHeaders?.["x-should-retry"]).toBe("false");
      const runId = e.responseHeaders?.["service-run-id"];
      expect(runId).toMatch(/^run_/);
      expect(answered(409)).toBe(handled + 1);
      const runs = await runsOf("ai-nobody");
      expect(runs.map((r) => r.id)).toEqual([runId]);
      expect(runs[0].usageRows.map((u) => [u.kind, u.costClass])).toEqual([["run", "app_served"]]);

      // The AI SDK treats 409 as retryable and does not read x-should-retry: with its default
      // two retries it sends the same request three times. With an Idempotency-Key (the same
      // headers on each of its retries) the server counts one run.
      const retried = await generateText({ model: svc("auto"), providerOptions: as("ai-nobody-retried"), prompt: "hi", headers: { "Idempotency-Key": "ai-nobody-retried-1" } }).catch((x: unknown) => x);
      expect(RetryError.isInstance(retried)).toBe(true);
      const r = retried as RetryError;
      expect(r.reason).toBe("maxRetriesExceeded");
      expect(r.errors).toHaveLength(3);
      const ids = r.errors.map((x) => (x as APICallError).responseHeaders?.["service-run-id"]);
      expect(new Set(ids).size).toBe(1);
      expect((r.lastError as APICallError).statusCode).toBe(409);
      expect(answered(409)).toBe(handled + 4);
      expect((await runsOf("ai-nobody-retried")).map((x) => x.id)).toEqual([ids[0]]);
    }, 30_000);

    it("a request without user is a 400 invalid_request naming the param, not retried", async () => {
      const svc = provider();
      const before = answered(400);
      const err = await generateText({ model: svc("svc/echo"), prompt: "hi" }).catch((e: unknown) => e);
      expect(APICallError.isInstance(err)).toBe(true);
      const e = err as APICallError;
      expect(e.statusCode).toBe(400);
      expect(e.isRetryable).toBe(false);
      expect(e.data).toMatchObject({ error: { code: "invalid_request", param: "user" } });
      expect(e.message).toMatch(/user/);
      expect(answered(400)).toBe(before + 1);
    });

    it("a runtime failure after streaming began reaches streamText as an error part after the text that came", async () => {
      const svc = provider();
      const before = await runCount("bob");
      const parts: { type: string; text?: string; error?: unknown }[] = [];
      const errors: unknown[] = [];
      const r = streamText({ model: svc("auto"), providerOptions: as("bob"), prompt: "tell me", maxRetries: 0, onError: ({ error }) => void errors.push(error) });
      for await (const p of r.fullStream) parts.push(p as never);
      const text = parts.filter((p) => p.type === "text-delta").map((p) => p.text).join("");
      expect(text).toBe("Half an answer");
      const error = parts.find((p) => p.type === "error");
      expect(error).toBeDefined();
      // The provider hands the frame's `error` object through as the part's error.
      expect(error!.error).toMatchObject({ type: "api_error", code: "runtime_error", message: expect.stringMatching(/^The user's runtime failed: The stream from ollama broke/) });
      expect(errors).toEqual([error!.error]);
      expect(await runCount("bob")).toBe(before + 1);
      expect(parts.findIndex((p) => p.type === "error")).toBeGreaterThan(parts.findIndex((p) => p.type === "text-delta"));
    });
  });

  describe("LangChain's ChatOpenAI (@langchain/openai)", () => {
    const chat = (modelName: string, user: string | undefined, fields: Record<string, unknown> = {}) =>
      new ChatOpenAI({ model: modelName, apiKey: server.dev.appKey, configuration: { baseURL: `${server.url}/v1` }, ...(user ? { user } : {}), ...fields });

    it("invoke on svc/echo and auto: the exact texts and usage; `user` via the documented field and via modelKwargs", async () => {
      const eve = await chat("svc/echo", "lc-eve").invoke([new HumanMessage("hello there")]);
      expect(eve).toBeInstanceOf(AIMessage);
      expect(eve.content).toBe("hello there");
      expect(eve.usage_metadata).toMatchObject({ input_tokens: 2, output_tokens: 2, total_tokens: 4 });
      expect(eve.response_metadata).toMatchObject({ finish_reason: "stop", model_name: "svc/echo" });
      const viaKwargs = await chat("svc/echo", undefined, { modelKwargs: { user: "lc-kwargs" } }).invoke("via kwargs");
      expect(viaKwargs.content).toBe("via kwargs");
      expect(await runCount("lc-eve")).toBe(1);
      expect(await runCount("lc-kwargs")).toBe(1);

      const before = await runCount("alice");
      const hello = await chat("auto", "alice").invoke("hi");
      expect(hello.content).toBe(HELLO);
      expect(hello.usage_metadata).toMatchObject({ input_tokens: 12, output_tokens: 7, total_tokens: 19 });
      expect(hello.response_metadata).toMatchObject({ finish_reason: "stop", model_name: "llama3.2:3b" });
      expect(await runCount("alice")).toBe(before + 1);
    });

    it("stream: the chunks concatenate to the full text, with the usage", async () => {
      for (const [modelName, user, prompt, expected, usage] of [
        ["svc/echo", "lc-eve", "one two three", "one two three", { input_tokens: 3, output_tokens: 3, total_tokens: 6 }],
        ["auto", "alice", "hi", HELLO, { input_tokens: 12, output_tokens: 7, total_tokens: 19 }],
      ] as const) {
        const chunks: AIMessageChunk[] = [];
        for await (const c of await chat(modelName, user).stream(prompt)) chunks.push(c);
        expect(chunks.length, modelName).toBeGreaterThan(2);
        expect(chunks.map((c) => c.content).join(""), modelName).toBe(expected);
        const whole = chunks.reduce((a, b) => a.concat(b));
        expect(whole.content, modelName).toBe(expected);
        expect(whole.usage_metadata, modelName).toMatchObject(usage);
      }
    });

    it("bindTools: the AIMessage carries the parsed tool call; the ToolMessage sent back gets the stand-in's answer", async () => {
      const weather = lcTool(async ({ city }: { city: string }) => `sunny in ${city}`, { name: "weather", description: "The weather in a city", schema: z.object({ city: z.string() }) });
      const withTools = chat("auto", "alice").bindTools([weather]);
      const before = await runCount("alice");
      const sent = model.requests.length;
      const question = new HumanMessage("weather?");
      const first = await withTools.invoke([question]);
      expect(first.tool_calls).toEqual([{ name: "weather", args: { city: "Paris" }, id: "call_1", type: "tool_call" }]);
      expect(first.response_metadata).toMatchObject({ finish_reason: "tool_calls" });
      const offered = model.requests[sent] as { tools: { type: string; function: { name: string; parameters: { properties: Record<string, unknown> } } }[] };
      expect(offered.tools.map((t) => [t.type, t.function.name, Object.keys(t.function.parameters.properties)])).toEqual([["function", "weather", ["city"]]]);

      const result = (await weather.invoke(first.tool_calls![0])) as ToolMessage;
      expect(result).toBeInstanceOf(ToolMessage);
      const second = await withTools.invoke([question, first, result]);
      expect(second.content).toBe("The tool said: sunny in Paris");
      expect(second.tool_calls).toEqual([]);
      expect(model.requests[sent + 1]).toMatchObject({ messages: [{ role: "user" }, { role: "assistant" }, { role: "tool", tool_call_id: "call_1", content: "sunny in Paris" }] });
      expect(await runCount("alice")).toBe(before + 2);
    });

    it("the 409 handback throws with status 409 and code serve_in_app; LangChain does not retry it: one request, one run", async () => {
      const before = answered(409);
      // LangChain's default of 6 retries is left on: its caller refuses to retry a 409.
      const err = await chat("auto", "lc-nobody").invoke("hi").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      const e = err as Error & { status?: number; code?: string; error?: { message?: string; code?: string }; headers?: Headers };
      expect(e.status).toBe(409);
      expect(e.code).toBe("serve_in_app");
      expect(e.message).toMatch(/has no reachable model runtime for model \S+: .*; serve this completion/);
      expect(e.headers?.get("x-should-retry")).toBe("false");
      const runId = e.headers?.get("service-run-id");
      expect(runId).toMatch(/^run_/);
      expect(answered(409)).toBe(before + 1);
      const runs = await runsOf("lc-nobody");
      expect(runs.map((r) => r.id)).toEqual([runId]);
      expect(runs[0].usageRows.map((u) => [u.kind, u.costClass])).toEqual([["run", "app_served"]]);
    });

    it("a runtime failure after streaming began: the chunks that came, then the stream throws the error frame's message", async () => {
      const before = await runCount("bob");
      const texts: unknown[] = [];
      const err = await (async () => {
        for await (const c of await chat("auto", "bob").stream("tell me, langchain")) texts.push(c.content);
      })().catch((e: unknown) => e);
      expect(texts.join("")).toBe("Half an answer");
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(/The user's runtime failed: The stream from ollama broke/);
      expect((err as { code?: string }).code).toBe("runtime_error");
      expect(await runCount("bob")).toBe(before + 1);
    });

    it("a request without user throws a 400 invalid_request, not retried", async () => {
      const before = answered(400);
      const err = await chat("svc/echo", undefined).invoke("hi").catch((e: unknown) => e);
      const e = err as Error & { status?: number; code?: string; param?: string };
      expect(e.status).toBe(400);
      expect(e.code).toBe("invalid_request");
      expect(e.param).toBe("user");
      expect(e.message).toMatch(/user/);
      expect(answered(400)).toBe(before + 1);
    });
  });

  describe("raw HTTP: a runtime that dies mid-answer", () => {
    const post = (body: Record<string, unknown>) =>
      server.fetch("/v1/chat/completions", {
        method: "POST",
        headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });

    it("streamed: the text that came, then a final error frame in the envelope's shape and no [DONE]; not streamed: 503 service_unavailable", async () => {
      const chats = brittle.chats;
      const before = await runCount("bob");
      // A prompt of its own: an identical body within 10 s would be the same (failed) run, replayed.
      const res = await post({ model: "auto", user: "bob", messages: [{ role: "user", content: "tell me, raw" }], stream: true, stream_options: { include_usage: true } });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
      const runId = res.headers.get("service-run-id");
      expect(runId).toMatch(/^run_/);
      const frames = sseData(await res.text());
      expect(frames).not.toContain("[DONE]");
      const last = frames.at(-1) as { error?: { type: string; code: string; message: string } };
      expect(last.error).toMatchObject({ type: "api_error", code: "runtime_error" });
      expect(last.error!.message).toMatch(/^The user's runtime failed: The stream from ollama broke/);
      const chunks = frames.slice(0, -1) as { object: string; choices: { delta: { role?: string; content?: string }; finish_reason: string | null }[] }[];
      expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
      expect(chunks[0].choices[0].delta.role).toBe("assistant");
      expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("Half an answer");
      expect(chunks.every((c) => c.choices[0].finish_reason === null)).toBe(true);

      const plain = await post({ model: "auto", user: "bob", messages: [{ role: "user", content: "tell me, raw" }] });
      expect(plain.status).toBe(503);
      expect(plain.headers.get("service-run-id")).toMatch(/^run_/);
      const body = (await plain.json()) as { error: { type: string; code: string; message: string; requestId: string } };
      expect(body.error).toMatchObject({ code: "service_unavailable" });
      expect(body.error.message).toMatch(/^The user's runtime could not answer: The stream from ollama broke/);
      expect(body.error.requestId).toBe(plain.headers.get("request-id"));
      expect(brittle.chats).toBe(chats + 2);

      const runs = await runsOf("bob");
      expect(runs).toHaveLength(before + 2);
      expect(runs.slice(-2).map((r) => [r.id, r.status, (r.error as { code?: string } | null)?.code])).toEqual([
        [runId, "failed", "runtime_error"],
        [plain.headers.get("service-run-id"), "failed", "runtime_error"],
      ]);
    });
  });
});
