import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { generateText, stepCountIs, streamText, tool as aiTool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool as lcTool } from "@langchain/core/tools";
import { TOOLS_DIR } from "../../scripts/test-tools.mjs";
import { onEachDatabase } from "../helpers/databases.js";
import { withModelMachine } from "../helpers/worker.js";

/**
 * The Responses API with the clients apps use today, unmodified but for their
 * base URL and key, on each database: the Vercel AI SDK's default OpenAI
 * provider (`openai(model)` speaks the Responses API), LangChain's `ChatOpenAI`
 * with `useResponsesApi`, and the OpenAI Agents SDK's `OpenAIResponsesModel`
 * (in a child process: it needs zod 4). `auto` reaches a real worker serving the
 * model stand-in, which calls the first tool offered (`{"city":"Paris"}`) and
 * then answers `The tool said: <result>`.
 */

const HELLO = "Hello from the stand-in model.";
const execFileAsync = promisify(execFile);

onEachDatabase("responses with the AI SDK, LangChain and the Agents SDK on $db.name", (db) => {
  const at = withModelMachine(db);

  const responseRuns = async (externalId: string) =>
    at.server.db.prisma.run.findMany({ where: { endUser: { externalId }, source: "responses" }, include: { usageRows: true }, orderBy: { createdAt: "asc" } });

  describe("the Vercel AI SDK's default OpenAI provider (the Responses API)", () => {
    const provider = () => createOpenAI({ baseURL: `${at.server.url}/v1`, apiKey: at.server.dev.appKey });

    it("generateText and streamText on svc/echo and on the user's runtime: text, usage, one responses run each", async () => {
      const openai = provider();
      const plain = await generateText({ model: openai("svc/echo"), providerOptions: { openai: { user: "olga" } }, system: "be brief", prompt: "hello from ai" });
      expect(plain.text).toBe("hello from ai");
      expect(plain.finishReason).toBe("stop");
      expect([plain.usage.inputTokens, plain.usage.outputTokens]).toEqual([5, 3]);
      expect(plain.response.headers?.["service-run-id"]).toMatch(/^run_/);
      const streamed = streamText({ model: openai("svc/echo"), providerOptions: { openai: { safetyIdentifier: "olga" } }, prompt: "one two three" });
      const pieces: string[] = [];
      for await (const t of streamed.textStream) pieces.push(t);
      expect(pieces.length).toBeGreaterThan(1);
      expect(pieces.join("")).toBe("one two three");
      expect((await streamed.usage).outputTokens).toBe(3);
      expect(await responseRuns("olga")).toHaveLength(2);

      const sent = at.model.requests.length;
      const machine = await generateText({ model: openai("auto"), providerOptions: { openai: { user: "alice" } }, prompt: "hi" });
      expect(machine.text).toBe(HELLO);
      expect(machine.response.modelId).toBe("llama3.2:3b");
      expect([machine.usage.inputTokens, machine.usage.outputTokens]).toEqual([12, 7]);
      const machineStream = streamText({ model: openai("ollama/llama3.2:3b"), providerOptions: { openai: { user: "alice" } }, prompt: "hi" });
      let text = "";
      for await (const t of machineStream.textStream) text += t;
      expect(text).toBe(HELLO);
      expect(at.model.requests.length).toBe(sent + 2);
    });

    it("a second turn that sends the first answer back as an item_reference (the AI SDK's default with store) reaches the runtime as the assistant's text", async () => {
      const openai = provider();
      const first = await generateText({ model: openai("auto"), providerOptions: { openai: { user: "alice" } }, prompt: "hi" });
      const again = await generateText({ model: openai("auto"), providerOptions: { openai: { user: "alice" } }, messages: [{ role: "user", content: "hi" }, ...first.response.messages, { role: "user", content: "and again" }], include: { requestBody: true } });
      expect(again.text).toBe(HELLO);
      expect(JSON.stringify(again.request.body)).toContain('"item_reference"');
      const body = at.model.requests.at(-1) as { messages: { role: string; content: unknown }[] };
      expect(body.messages).toEqual([
        { role: "user", content: "hi" },
        { role: "assistant", content: HELLO },
        { role: "user", content: "and again" },
      ]);
      // Another user cannot reference alice's items: the same 404 as an unknown id, nothing run.
      const before = at.model.requests.length;
      const foreign = await generateText({ model: openai("auto"), maxRetries: 0, providerOptions: { openai: { user: "mallory" } }, messages: [{ role: "user", content: "hi" }, ...first.response.messages, { role: "user", content: "x" }] }).catch((e: unknown) => e);
      expect(String((foreign as Error).message)).toMatch(/No item "msg_[a-z0-9]{24}"/);
      expect(at.model.requests.length).toBe(before);
    });

    it("runs the tool loop itself, generated and streamed: the SDK calls the tool with the model's arguments and sends its output back", async () => {
      const openai = provider();
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
        const options = { model: openai("auto"), providerOptions: { openai: { user: "alice" } }, prompt: "weather?", tools: { weather }, stopWhen: stepCountIs(5) };
        const r = mode === "generate" ? await generateText(options) : streamText(options);
        const text = await r.text;
        const steps = await r.steps;
        expect(calls, mode).toEqual([{ city: "Paris" }]);
        expect(steps.map((s) => s.finishReason), mode).toEqual(["tool-calls", "stop"]);
        expect(text, mode).toBe("The tool said: sunny");
      }
    });
  });

  describe("LangChain's ChatOpenAI on the Responses API", () => {
    const chat = (user: string, modelName = "auto") => new ChatOpenAI({ model: modelName, apiKey: at.server.dev.appKey, configuration: { baseURL: `${at.server.url}/v1` }, useResponsesApi: true, user, maxRetries: 0 });

    it("invoke and stream, on svc/echo and the user's runtime", async () => {
      const echo = await chat("lena", "svc/echo").invoke("hello langchain");
      expect(echo.content).toEqual([expect.objectContaining({ type: "text", text: "hello langchain" })]);
      const out = await chat("alice").invoke([new HumanMessage("hi")]);
      expect(out.text).toBe(HELLO);
      expect(out.usage_metadata).toMatchObject({ input_tokens: 12, output_tokens: 7, total_tokens: 19 });
      let streamed = "";
      for await (const chunk of await chat("alice").stream("hi")) streamed += chunk.text;
      expect(streamed).toBe(HELLO);
      expect((await responseRuns("lena")).length).toBe(1);
    });

    it("binds a tool: the call comes back, LangChain sends its result, the runtime answers", async () => {
      const weather = lcTool(async ({ city }: { city: string }) => `sunny in ${city}`, { name: "weather", description: "The weather in a city", schema: z.object({ city: z.string() }) });
      const withTools = chat("alice").bindTools([weather]);
      const first = (await withTools.invoke([new HumanMessage("weather?")])) as AIMessage;
      expect(first.tool_calls?.map((c) => [c.name, c.args])).toEqual([["weather", { city: "Paris" }]]);
      const result = await weather.invoke(first.tool_calls![0]);
      const second = await withTools.invoke([new HumanMessage("weather?"), first, new ToolMessage({ content: String(result.content), tool_call_id: first.tool_calls![0].id! })]);
      expect(second.text).toBe("The tool said: sunny in Paris");
    });
  });

  describe("the OpenAI Agents SDK on the Responses API", () => {
    it("runs an agent with a function tool to completion, plain and streamed; each model call a responses run of the user", async () => {
      const cases = [
        { name: "plain", user: "alice", model: "auto", input: "What is the weather in Paris?", via: "responses" },
        { name: "streamed", user: "alice", model: "auto", input: "What is the weather in Paris?", via: "responses", stream: true },
      ];
      const arg = JSON.stringify({ baseURL: `${at.server.url}/v1`, apiKey: at.server.dev.appKey, cases });
      const { stdout, stderr } = await execFileAsync(process.execPath, [path.join(TOOLS_DIR, "agents-client.mjs"), arg], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, timeout: 90_000 });
      expect(stderr).toBe("");
      const out = JSON.parse(stdout) as { cases: Record<string, { error?: unknown; finalOutput: string; calls: { input: unknown }[]; items: string[]; usage: { requests: number }; sent: { path: string; body: { user?: string; safety_identifier?: string } }[]; statuses: { status: number; runId: string | null }[]; deltas?: string[] }> };
      for (const name of ["plain", "streamed"]) {
        const c = out.cases[name];
        expect(c.error, JSON.stringify(c.error)).toBeUndefined();
        expect(c.finalOutput, name).toBe("The tool said: sunny in Paris");
        expect(c.calls.map((x) => x.input), name).toEqual([{ city: "Paris" }]);
        expect(c.items, name).toEqual(["tool_call_item", "tool_call_output_item", "message_output_item"]);
        expect(c.usage.requests, name).toBe(2);
        expect(c.sent.map((s) => s.path), name).toEqual(["/v1/responses", "/v1/responses"]);
        expect(c.statuses.map((s) => s.status), name).toEqual([200, 200]);
        const runs = await at.server.db.prisma.run.findMany({ where: { id: { in: c.statuses.map((s) => s.runId!) } }, include: { endUser: true } });
        expect(runs.map((r) => [r.source, r.endUser.externalId, r.status]), name).toEqual([
          ["responses", "alice", "completed"],
          ["responses", "alice", "completed"],
        ]);
      }
      expect(out.cases.streamed.deltas!.join("")).toBe("The tool said: sunny in Paris");
    });
  });
});
