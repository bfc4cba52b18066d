import { describe, expect, it } from "vitest";
import { createParser } from "eventsource-parser";
import { onEachDatabase } from "../helpers/databases.js";
import { withModelMachine } from "../helpers/worker.js";
import { expectOpenResponse, expectOpenResponsesStream } from "../helpers/open-responses.js";

/**
 * The Open Responses compliance cases (the specification's suite: a basic text
 * response, a streamed response, a system prompt, a function tool call, a
 * streamed function tool call with argument deltas, an image input, a
 * multi-turn input, `previous_response_id`), sent over raw HTTP as the suite
 * sends them, against `svc/echo` and against a paired machine's model runtime
 * (the stand-in, speaking the OpenAI-compatible chat API a real worker sends
 * to), on each database. Each answer and each stream event is checked against
 * the specification's schemas (test/helpers/open-responses.ts); each stream's
 * frames name their event (`event:` equal to `type`) and end with `data: [DONE]`.
 *
 * On `svc/echo`, which takes no images, the image case is a clear 400 before
 * anything is counted; its tool cases are `svc/echo` scripts (as on /v1/runs).
 */

const IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const WEATHER = { type: "function", name: "get_weather", description: "Get the weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, strict: null };
const CALL_SCRIPT = JSON.stringify([{ call: "get_weather", arguments: { city: "Paris" } }, { say: "It is {{result}}." }]);

onEachDatabase("Open Responses compliance cases on $db.name", (db) => {
  const at = withModelMachine(db);

  const post = (body: Record<string, unknown>) =>
    at.server.fetch("/v1/responses", { method: "POST", headers: { authorization: `Bearer ${at.server.dev.appKey}`, "content-type": "application/json" }, body: JSON.stringify(body) });

  async function create(body: Record<string, unknown>): Promise<Record<string, any>> {
    const res = await post(body);
    const json = (await res.json()) as Record<string, any>;
    expect(res.status, JSON.stringify(json)).toBe(200);
    expectOpenResponse(json);
    return json;
  }

  /** A streamed response's events, each frame's `event:` checked against its `type`, the stream ending with `data: [DONE]`. */
  async function stream(body: Record<string, unknown>): Promise<Record<string, any>[]> {
    const res = await post({ ...body, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const frames: { event?: string; data: string }[] = [];
    const parser = createParser({ onEvent: (e) => frames.push({ event: e.event, data: e.data }) });
    parser.feed(await res.text());
    expect(frames.at(-1)!.data).toBe("[DONE]");
    const events = frames.slice(0, -1).map((f) => {
      const e = JSON.parse(f.data) as Record<string, any>;
      expect(f.event).toBe(e.type);
      return e;
    });
    expectOpenResponsesStream(events);
    return events;
  }

  const text = (r: Record<string, any>) => (r.output as { type: string; content?: { text: string }[] }[]).filter((i) => i.type === "message").flatMap((i) => i.content!.map((c) => c.text)).join("");
  const calls = (r: Record<string, any>) => (r.output as { type: string; call_id: string; name: string; arguments: string }[]).filter((i) => i.type === "function_call");

  for (const target of ["svc/echo", "a paired machine's model runtime"] as const) {
    const echo = target === "svc/echo";
    const modelName = echo ? "svc/echo" : "auto";
    const user = echo ? "compliance-echo" : "alice";
    const base = { model: modelName, user };

    describe(target, () => {
      it("basic text response", async () => {
        const r = await create({ ...base, input: "Say hello in one word." });
        expect(r.status).toBe("completed");
        expect(text(r)).toBe(echo ? "Say hello in one word." : "Hello from the stand-in model.");
        expect(r.usage.total_tokens).toBe(r.usage.input_tokens + r.usage.output_tokens);
      });

      it("streamed response", async () => {
        const events = await stream({ ...base, input: "Count from one to five." });
        const deltas = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
        const final = events.at(-1)!.response;
        expect(final.status).toBe("completed");
        expect(deltas).toBe(text(final));
        expect(events.find((e) => e.type === "response.output_text.done")!.text).toBe(deltas);
      });

      it("system prompt (instructions, and a system message item)", async () => {
        const r = await create({ ...base, instructions: "You are a pirate.", input: [{ type: "message", role: "system", content: "Speak briefly." }, { type: "message", role: "user", content: "Hello" }] });
        expect(r.instructions).toBe("You are a pirate.");
        if (!echo) expect((at.model.requests.at(-1) as { messages: unknown[] }).messages).toEqual([{ role: "system", content: "You are a pirate." }, { role: "system", content: "Speak briefly." }, { role: "user", content: "Hello" }]);
      });

      it("function tool call", async () => {
        const r = await create({ ...base, input: echo ? CALL_SCRIPT : "What is the weather in Paris?", tools: [WEATHER] });
        const [call] = calls(r);
        expect([call.name, JSON.parse(call.arguments)]).toEqual(["get_weather", { city: "Paris" }]);
        expect(call.call_id).toBeTruthy();
        expect(r.tools).toEqual([WEATHER]);
      });

      it("streamed function tool call with argument deltas", async () => {
        const events = await stream({ ...base, input: echo ? CALL_SCRIPT : "What is the weather in Paris?", tools: [WEATHER] });
        const added = events.find((e) => e.type === "response.output_item.added" && e.item.type === "function_call")!;
        expect(added.item).toMatchObject({ name: "get_weather", arguments: "", status: "in_progress" });
        const deltas = events.filter((e) => e.type === "response.function_call_arguments.delta" && e.item_id === added.item.id).map((e) => e.delta).join("");
        const done = events.find((e) => e.type === "response.function_call_arguments.done")!;
        expect(JSON.parse(deltas)).toEqual({ city: "Paris" });
        expect(done.arguments).toBe(deltas);
        expect(calls(events.at(-1)!.response)[0].arguments).toBe(deltas);
      });

      it("image input", async () => {
        const input = [{ role: "user", content: [{ type: "input_text", text: "What is in this image?" }, { type: "input_image", image_url: IMAGE }] }];
        if (echo) {
          const runs = await at.server.db.prisma.run.count();
          const res = await post({ ...base, input });
          expect(res.status).toBe(400);
          expect(((await res.json()) as { error: { message: string; param: string } }).error).toMatchObject({ param: "input", message: expect.stringMatching(/svc\/echo takes no images/) });
          expect(await at.server.db.prisma.run.count()).toBe(runs);
          // The positive control: its text alone is answered and counted.
          expect(text(await create({ ...base, input: "What is in this image?" }))).toBe("What is in this image?");
          expect(await at.server.db.prisma.run.count()).toBe(runs + 1);
          return;
        }
        const r = await create({ ...base, input });
        expect(r.status).toBe("completed");
        const sent = (at.model.requests.at(-1) as { messages: { content: unknown }[] }).messages[0].content;
        expect(sent).toEqual([{ type: "text", text: "What is in this image?" }, { type: "image_url", image_url: { url: IMAGE } }]);
      });

      it("multi-turn input", async () => {
        const r = await create({
          ...base,
          input: [
            { type: "message", role: "user", content: "My name is Ada." },
            { type: "message", role: "assistant", content: "Nice to meet you, Ada." },
            { type: "message", role: "user", content: "What is my name?" },
          ],
        });
        expect(r.status).toBe("completed");
        if (echo) expect(text(r)).toBe("What is my name?");
        else expect((at.model.requests.at(-1) as { messages: unknown[] }).messages).toEqual([
          { role: "user", content: "My name is Ada." },
          { role: "assistant", content: "Nice to meet you, Ada." },
          { role: "user", content: "What is my name?" },
        ]);
      });

      it("previous_response_id", async () => {
        const first = await create({ ...base, input: echo ? CALL_SCRIPT : "What is the weather in Paris?", tools: [WEATHER] });
        const [call] = calls(first);
        const second = await create({ ...base, previous_response_id: first.id, tools: [WEATHER], input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }] });
        expect(second.previous_response_id).toBe(first.id);
        expect(text(second)).toBe(echo ? "It is sunny." : "The tool said: sunny");
        const third = await create({ ...base, previous_response_id: second.id, input: "Thanks!" });
        expect(third.status).toBe("completed");
        if (!echo) {
          const sent = (at.model.requests.at(-1) as { messages: { role: string }[] }).messages.map((m) => m.role);
          expect(sent).toEqual(["user", "assistant", "tool", "assistant", "user"]);
        }
      });
    });
  }
});
