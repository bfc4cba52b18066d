import { afterAll, beforeAll, expect, it } from "vitest";
import OpenAI from "openai";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { expectError } from "../helpers/requests.js";

/**
 * Chat completions with a client nobody here wrote: the official `openai` npm
 * package pointed at the real server's base URL, on each database; `auto` goes
 * to a real worker process serving a model stand-in.
 */
onEachDatabase("chat completions with the official openai client on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let client: OpenAI;
  let worker: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    model = await startModelStandIn();
    client = new OpenAI({ apiKey: server.dev.appKey, baseURL: `${server.url}/v1`, maxRetries: 2 });
    worker = await startModelMachine(server, server.dev, "alice", model.url);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  const runsOf = async (externalId: string) => {
    const u = await server.db.prisma.endUser.findFirst({ where: { externalId } });
    return u ? server.db.prisma.run.findMany({ where: { endUserId: u.id }, include: { usageRows: true } }) : [];
  };

  it("svc/echo answers plain and streamed, with usage in the last chunk; a run record and a free ledger row, nothing counted", async () => {
    const { data, response } = await client.chat.completions.create({ model: "svc/echo", user: "eve", messages: [{ role: "developer", content: "be brief" }, { role: "user", content: "hello there" }] }).withResponse();
    expect(data.object).toBe("chat.completion");
    expect(data.choices[0].message).toMatchObject({ role: "assistant", content: "hello there" });
    expect(data.choices[0].finish_reason).toBe("stop");
    expect(data.usage).toEqual({ prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 });
    expect(response.headers.get("service-run-id")).toMatch(/^run_/);

    const stream = await client.chat.completions.create({ model: "svc/echo", user: "eve", messages: [{ role: "user", content: "one two three" }], stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("one two three");
    expect(chunks.at(-2)!.choices[0].finish_reason).toBe("stop");
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
    const runs = await runsOf("eve");
    expect(runs.length).toBeGreaterThanOrEqual(2);
    for (const r of runs) expect(r.usageRows.map((u) => [u.kind, u.costClass, Number(u.amountMicros)])).toEqual([["echo", "free", 0]]);
  });

  it("auto goes to the user's own model runtime: plain, streamed, and with tools coming back to the caller", async () => {
    const plain = await client.chat.completions.create({ model: "auto", user: "alice", messages: [{ role: "user", content: "hi" }] });
    expect(plain.choices[0].message.content).toBe("Hello from the stand-in model.");
    expect(plain.model).toBe("llama3.2:3b");
    expect(plain.usage).toEqual({ prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 });

    const stream = await client.chat.completions.create({ model: "ollama/llama3.2:3b", user: "alice", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage = null;
    for await (const c of stream) {
      text += c.choices[0]?.delta?.content ?? "";
      if (c.usage) usage = c.usage;
    }
    expect(text).toBe("Hello from the stand-in model.");
    expect(usage).toEqual({ prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 });

    // The caller owns the loop: the tool call comes back; the caller answers it in the next request.
    const tools = [{ type: "function" as const, function: { name: "weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const first = await client.chat.completions.create({ model: "auto", user: "alice", messages: [{ role: "user", content: "weather?" }], tools });
    expect(first.choices[0].finish_reason).toBe("tool_calls");
    const call = first.choices[0].message.tool_calls![0];
    expect(call).toMatchObject({ type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } });
    const second = await client.chat.completions.create({
      model: "auto",
      user: "alice",
      tools,
      messages: [{ role: "user", content: "weather?" }, first.choices[0].message, { role: "tool", tool_call_id: call.id, content: "sunny" }],
    });
    expect(second.choices[0].message.content).toBe("The tool said: sunny");

    const runs = await runsOf("alice");
    expect(runs.length).toBe(4);
    for (const r of runs) expect(r.usageRows.filter((u) => u.kind === "run").map((u) => u.costClass)).toEqual(["user_hardware"]);
  });

  it("hands back with 409 serve_in_app that the client does not retry, counted once; a retry with the same Idempotency-Key is the same run", async () => {
    const key = "chat-nobody-1";
    const err = await client.chat.completions.create({ model: "auto", user: "nobody", messages: [{ role: "user", content: "hi" }] }, { headers: { "Idempotency-Key": key } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.ConflictError);
    const e = err as InstanceType<typeof OpenAI.ConflictError>;
    expect(e.status).toBe(409);
    expect(e.code).toBe("serve_in_app");
    expect((e.error as { message: string }).message).toMatch(/serve this completion/);
    expect(e.headers?.get("x-should-retry")).toBe("false");
    const runId = e.headers?.get("service-run-id");
    expect(runId).toMatch(/^run_/);
    // A client that retries anyway (raw, the same body and key) gets the same run, not a second count.
    const again = await server.fetch("/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json", "idempotency-key": key },
      body: JSON.stringify({ model: "auto", user: "nobody", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(again.headers.get("service-run-id")).toBe(runId);
    await expectError(again, 409, "serve_in_app");
    const runs = await runsOf("nobody");
    expect(runs).toHaveLength(1);
    expect(runs[0].usageRows.map((u) => [u.kind, u.costClass])).toEqual([["run", "app_served"]]);
  });

  it("refuses a request without user with a 400 the client reads, and lists the models the user can ask for", async () => {
    const err = await client.chat.completions.create({ model: "svc/echo", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("invalid_request");
    expect((err as Error).message).toMatch(/user/);
    const anyone = await client.models.list();
    expect(anyone.data.map((m) => m.id)).toEqual(["svc/echo", "auto"]);
    const alice = await client.models.list({ query: { user: "alice" } } as never);
    expect(alice.data.map((m) => m.id)).toEqual(["svc/echo", "auto", "ollama/llama3.2:3b", "ollama/qwen2.5:7b"]);
  });
});
