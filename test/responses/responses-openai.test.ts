import { beforeAll, describe, expect, it } from "vitest";
import OpenAI from "openai";
import { onEachDatabase } from "../helpers/databases.js";
import { withModelMachine } from "../helpers/worker.js";
import { expectOpenResponse, expectOpenResponsesStream } from "../helpers/open-responses.js";

/**
 * The Responses API with the official `openai` client (`client.responses.*`),
 * unmodified but for its base URL and key, on each database: `svc/echo`, and
 * `auto` reaching a real worker process serving the model stand-in. Every answer
 * and every stream event is checked against the Open Responses schemas
 * (test/helpers/open-responses.ts, written from the specification, not from
 * this service's contract).
 */
onEachDatabase("responses with the official openai client on $db.name", (db) => {
  const at = withModelMachine(db);
  let client: OpenAI;
  beforeAll(() => {
    client = new OpenAI({ apiKey: at.server.dev.appKey, baseURL: `${at.server.url}/v1`, maxRetries: 0 });
  });

  const runsOf = async (externalId: string) => {
    const u = await at.server.db.prisma.endUser.findFirst({ where: { externalId } });
    return u ? at.server.db.prisma.run.findMany({ where: { endUserId: u.id }, include: { usageRows: true }, orderBy: { createdAt: "asc" } }) : [];
  };

  describe("svc/echo", () => {
    it("answers plain and streamed: the text, usage, ids, the run behind it, a free ledger row", async () => {
      const { data, response } = await client.responses.create({ model: "svc/echo", user: "eve", instructions: "be brief", input: "hello there" }).withResponse();
      expectOpenResponse(data);
      expect(data.status).toBe("completed");
      expect(data.output_text).toBe("hello there");
      expect(data.instructions).toBe("be brief");
      expect(data.id).toMatch(/^resp_[a-z0-9]{24}$/);
      expect(response.headers.get("service-run-id")).toBe(`run_${data.id.slice(5)}`);
      expect(data.usage).toMatchObject({ input_tokens: 4, output_tokens: 2, total_tokens: 6 });

      const stream = await client.responses.create({ model: "svc/echo", user: "eve", input: [{ role: "user", content: [{ type: "input_text", text: "one two three" }] }], stream: true });
      const events = [];
      for await (const e of stream) events.push(e);
      expectOpenResponsesStream(events);
      expect(events.filter((e) => e.type === "response.output_text.delta").map((e) => (e as { delta: string }).delta).join("")).toBe("one two three");
      const done = events.at(-1) as { type: string; response: { output_text?: string; usage: { output_tokens: number } } };
      expect(done.type).toBe("response.completed");
      expect(done.response.usage.output_tokens).toBe(3);

      const runs = await runsOf("eve");
      expect(runs).toHaveLength(2);
      for (const r of runs) {
        expect(r.source).toBe("responses");
        expect(r.usageRows.map((u) => [u.kind, u.costClass, Number(u.amountMicros)])).toEqual([["echo", "free", 0]]);
      }
    });

    it("drives a function tool loop from a svc/echo script, continued with previous_response_id; the stored response is read, listed and deleted", async () => {
      const script = JSON.stringify([{ call: "get_weather", arguments: { city: "Paris" } }, { say: "It is {{result}}." }]);
      const tools = [{ type: "function" as const, name: "get_weather", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }];
      const first = await client.responses.create({ model: "svc/echo", user: "eve", input: script, tools });
      expectOpenResponse(first);
      const call = first.output.find((i) => i.type === "function_call")!;
      expect(call).toMatchObject({ type: "function_call", name: "get_weather", arguments: '{"city":"Paris"}', status: "completed" });
      const second = await client.responses.create({
        model: "svc/echo",
        user: "eve",
        previous_response_id: first.id,
        tools,
        input: [{ type: "function_call_output", call_id: (call as { call_id: string }).call_id, output: "sunny" }],
      });
      expectOpenResponse(second);
      expect(second.output_text).toBe("It is sunny.");
      expect(second.previous_response_id).toBe(first.id);

      const read = await client.responses.retrieve(second.id);
      expectOpenResponse(read);
      expect(read.output_text).toBe("It is sunny.");
      const items = await client.responses.inputItems.list(second.id);
      expect(items.data.map((i) => i.type)).toEqual(["function_call_output"]);
      const firstItems = await client.responses.inputItems.list(first.id, { order: "asc" });
      expect(firstItems.data).toHaveLength(1);
      expect(firstItems.data[0]).toMatchObject({ type: "message", role: "user" });

      const deleted = await client.responses.delete(first.id);
      expect(deleted).toMatchObject({ id: first.id, object: "response.deleted", deleted: true });
      const gone = await client.responses.retrieve(first.id).catch((e: unknown) => e);
      expect(gone).toBeInstanceOf(OpenAI.NotFoundError);
      // Continuing a deleted response is the same 404; the response that continued it still reads.
      const cont = await client.responses.create({ model: "svc/echo", user: "eve", previous_response_id: first.id, input: "again" }).catch((e: unknown) => e);
      expect(cont).toBeInstanceOf(OpenAI.NotFoundError);
      expect((await client.responses.retrieve(second.id)).output_text).toBe("It is sunny.");
      // Its run and ledger row stay: they are the usage.
      expect((await runsOf("eve")).find((r) => r.id === `run_${first.id.slice(5)}`)?.usageRows).toHaveLength(1);
    });

    it("refuses what it cannot do with a 400 naming it, nothing counted", async () => {
      const before = (await runsOf("eve")).length;
      const cases: [Record<string, unknown>, RegExp][] = [
        [{ tools: [{ type: "web_search" }] }, /only `function` tools/],
        [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=" }] }] }, /takes no images/],
        [{ text: { format: { type: "json_schema", name: "x", schema: { type: "object" } } } }, /answers text only/],
        [{ background: true }, /background/],
        [{ user: undefined }, /`user`/],
      ];
      for (const [patch, message] of cases) {
        const err = await client.responses.create({ model: "svc/echo", user: "eve", input: "hi", ...patch } as never).catch((e: unknown) => e);
        expect(err, JSON.stringify(patch)).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(message);
      }
      expect((await runsOf("eve")).length).toBe(before);
      // The positive control: the same request without what was refused is answered and counted once.
      expect((await client.responses.create({ model: "svc/echo", user: "eve", input: "hi" })).output_text).toBe("hi");
      expect((await runsOf("eve")).length).toBe(before + 1);
    });
  });

  describe("a paired machine's model runtime", () => {
    it("auto: plain and streamed reach the user's runtime, usage and model from it, one counted run each", async () => {
      const sent = at.model.requests.length;
      const plain = await client.responses.create({ model: "auto", user: "alice", instructions: "You are terse.", input: "hi", max_output_tokens: 64, temperature: 0.2 });
      expectOpenResponse(plain);
      expect(plain.output_text).toBe("Hello from the stand-in model.");
      expect(plain.model).toBe("llama3.2:3b");
      expect(plain.usage).toMatchObject({ input_tokens: 12, output_tokens: 7, total_tokens: 19 });
      const body = at.model.requests.at(-1) as { messages: { role: string; content: unknown }[]; max_tokens?: number; temperature?: number };
      expect(body.messages).toEqual([{ role: "system", content: "You are terse." }, { role: "user", content: "hi" }]);
      expect([body.max_tokens, body.temperature]).toEqual([64, 0.2]);

      const stream = await client.responses.create({ model: "ollama/llama3.2:3b", user: "alice", input: "hi", stream: true });
      const events = [];
      for await (const e of stream) events.push(e);
      expectOpenResponsesStream(events);
      expect(events.filter((e) => e.type === "response.output_text.delta").length).toBeGreaterThan(1);
      expect(at.model.requests.length).toBe(sent + 2);
      const runs = (await runsOf("alice")).filter((r) => r.source === "responses");
      expect(runs.length).toBeGreaterThanOrEqual(2);
      expect(runs.at(-1)!.usageRows.map((u) => [u.kind, u.costClass])).toEqual(expect.arrayContaining([["run", "user_hardware"]]));
    });

    it("a function tool round trip with previous_response_id: the call comes back to the client, its output goes on to the runtime", async () => {
      const tools = [{ type: "function" as const, name: "get_weather", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }];
      const stream = await client.responses.create({ model: "auto", user: "alice", input: "weather in Paris?", tools, tool_choice: "required", parallel_tool_calls: false, stream: true });
      const events = [];
      for await (const e of stream) events.push(e);
      expectOpenResponsesStream(events);
      expect(events.map((e) => e.type)).toContain("response.function_call_arguments.delta");
      // What the runtime was asked: the tool as a chat tool, the choice and parallelism as sent.
      expect(at.model.requests.at(-1)).toMatchObject({ tool_choice: "required", parallel_tool_calls: false, tools: [{ type: "function", function: { name: "get_weather" } }] });
      const first = (events.at(-1) as { response: OpenAI.Responses.Response }).response;
      const call = first.output.find((i) => i.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
      expect([call.name, JSON.parse(call.arguments)]).toEqual(["get_weather", { city: "Paris" }]);
      const second = await client.responses.create({ model: "auto", user: "alice", previous_response_id: first.id, tools, input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }] });
      expectOpenResponse(second);
      expect(second.output_text).toBe("The tool said: sunny");
      // The runtime saw the whole conversation: the question, the call and its output.
      const body = at.model.requests.at(-1) as { messages: { role: string; tool_calls?: { id: string }[]; tool_call_id?: string }[] };
      expect(body.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
      expect(body.messages[1].tool_calls![0].id).toBe(call.call_id);
      expect(body.messages[2].tool_call_id).toBe(call.call_id);
    });

    it("a user with nothing reachable gets a counted handback (409 serve_in_app) that the client does not retry; an idempotent retry is the same response", async () => {
      const err = await client.responses.create({ model: "auto", user: "nobody-online", input: "hi" }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.ConflictError);
      const e = err as InstanceType<typeof OpenAI.ConflictError>;
      expect((e.error as { code?: string }).code).toBe("serve_in_app");
      expect(e.headers?.get("service-run-id")).toMatch(/^run_/);
      expect(e.headers?.get("x-should-retry")).toBe("false");
      expect(await runsOf("nobody-online")).toHaveLength(1);

      const key = `idem-${Date.now()}`;
      const a = await client.responses.create({ model: "auto", user: "alice", input: "hi" }, { headers: { "Idempotency-Key": key } });
      const b = await client.responses.create({ model: "auto", user: "alice", input: "hi" }, { headers: { "Idempotency-Key": key } });
      expect(b.id).toBe(a.id);
      expect(b.output_text).toBe(a.output_text);
      expect((await runsOf("alice")).filter((r) => r.id === `run_${a.id.slice(5)}`)).toHaveLength(1);
    });

    it("402 at the plan's allowance: nothing run", async () => {
      const tenant = { appId: at.server.dev.appId, environment: at.server.dev.environment };
      await at.server.db.prisma.plan.create({ data: { id: "plan_resp_free", ...tenant, slug: "resp-free", name: "Free", allowanceUnit: "runs", allowance: 1n, overage: false, isDefault: true } });
      try {
        const sent = at.model.requests.length;
        await client.responses.create({ model: "auto", user: "alice-402", input: "hi" }).catch(() => undefined);
        const err = await client.responses.create({ model: "auto", user: "alice-402", input: "hi" }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.APIError);
        expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
        expect(((err as InstanceType<typeof OpenAI.APIError>).error as { code?: string }).code).toBe("allowance_exhausted");
        expect(at.model.requests.length).toBe(sent);
        expect(await runsOf("alice-402")).toHaveLength(1);
      } finally {
        await at.server.db.prisma.plan.update({ where: { id: "plan_resp_free" }, data: { isDefault: false, archivedAt: new Date() } });
      }
    });
  });

  // Last: it moves the service's clock a month on.
  it("past the retention (RESPONSES_RETENTION_DAYS, 30 by default) a stored response is a 404, then emptied like a deleted one; its usage stays", async () => {
    const old = await client.responses.create({ model: "svc/echo", user: "eve", input: "remember this for a month" });
    expect((await client.responses.retrieve(old.id)).output_text).toBe("remember this for a month");
    at.server.clock.advance(31 * 86_400);
    expect(await client.responses.retrieve(old.id).catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
    // The next create (past the hour since the last sweep) empties it.
    const fresh = await client.responses.create({ model: "svc/echo", user: "eve", input: "a new one" });
    const run = () => at.server.db.prisma.run.findUniqueOrThrow({ where: { id: `run_${old.id.slice(5)}` }, include: { usageRows: true } });
    await expect.poll(async () => JSON.stringify((await run()).request), { timeout: 10_000 }).not.toContain("remember this");
    expect((await run()).output).toBeNull();
    expect((await run()).usageRows).toHaveLength(1);
    // A positive control: the new one reads.
    expect((await client.responses.retrieve(fresh.id)).output_text).toBe("a new one");
  });
});
