import { beforeAll, expect, it } from "vitest";
import { NotFoundError, ServeInAppError, Svc, type ResponseFunctionCall, type ResponseStreamEvent } from "@svc/sdk";
import { onEachDatabase } from "../helpers/databases.js";
import { withModelMachine } from "../helpers/worker.js";
import { expectOpenResponse, expectOpenResponsesStream } from "../helpers/open-responses.js";

/**
 * The SDK's `svc.responses` (create, streamed as typed events, retrieve,
 * inputItems, delete) against the real server on each database, with a real
 * worker serving the model stand-in.
 */
onEachDatabase("svc.responses in the SDK on $db.name", (db) => {
  const at = withModelMachine(db);
  let svc: Svc;
  beforeAll(() => {
    svc = new Svc({ apiKey: at.server.dev.appKey, baseUrl: `${at.server.url}/v1`, maxRetries: 0 });
  });

  it("a tool loop on the user's runtime: a streamed call, its output sent back with previous_response_id, the stored responses read, listed and deleted", async () => {
    const tools = [{ type: "function" as const, name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } }];
    const stream = await svc.responses.create({ model: "auto", user: "alice", input: "weather?", tools, stream: true });
    expect(stream.runId).toMatch(/^run_/);
    const events: ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    expectOpenResponsesStream(events);
    const first = stream.final!;
    expect(first.id).toBe(`resp_${stream.runId!.slice(4)}`);
    const call = first.output.find((i): i is ResponseFunctionCall => i.type === "function_call")!;
    expect(JSON.parse(call.arguments)).toEqual({ city: "Paris" });

    const second = await svc.responses.create({ model: "auto", user: "alice", previous_response_id: first.id, tools, input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }] });
    expectOpenResponse(second);
    expect(second.output).toEqual([expect.objectContaining({ type: "message", content: [expect.objectContaining({ text: "The tool said: sunny" })] })]);

    // As it was answered (its end read from its run: within the second the answer was given).
    const read = await svc.responses.retrieve(second.id, { user: "alice" });
    expect({ ...read, completed_at: 0 }).toEqual({ ...second, completed_at: 0 });
    expect(Math.abs(read.completed_at! - second.completed_at!)).toBeLessThanOrEqual(1);
    expect(await svc.responses.retrieve(second.id, { user: "bob" }).catch((e: unknown) => e)).toBeInstanceOf(NotFoundError);
    const items = await svc.responses.inputItems(first.id, { order: "asc" });
    expect(items).toMatchObject({ object: "list", has_more: false, data: [{ type: "message", role: "user", content: [{ type: "input_text", text: "weather?" }] }] });
    expect(await svc.responses.delete(first.id)).toEqual({ id: first.id, object: "response.deleted", deleted: true });
    expect(await svc.responses.retrieve(first.id).catch((e: unknown) => e)).toBeInstanceOf(NotFoundError);
    // What it said is gone from its run too; its usage stays.
    const run = await at.server.db.prisma.run.findUniqueOrThrow({ where: { id: `run_${first.id.slice(5)}` }, include: { usageRows: true } });
    const stored = await at.server.db.prisma.runEvent.findMany({ where: { runId: run.id } });
    expect(stored.length).toBeGreaterThan(0);
    expect(JSON.stringify(run.request)).not.toContain("weather?");
    expect(JSON.stringify(stored.map((e) => e.data))).not.toContain("Paris");
    expect(run.usageRows.length).toBeGreaterThan(0);
    // A positive control: the second response, which continued it, still reads.
    expect((await svc.responses.retrieve(second.id)).id).toBe(second.id);
  });

  it("a handback is ServeInAppError with the run to report usage for; store: false is never readable", async () => {
    const err = await svc.responses.create({ model: "auto", user: "nobody-online", input: "hi" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServeInAppError);
    const unstored = await svc.responses.create({ model: "svc/echo", user: "alice", input: "forget me", store: false });
    expect(unstored.store).toBe(false);
    expect(await svc.responses.retrieve(unstored.id).catch((e: unknown) => e)).toBeInstanceOf(NotFoundError);
    const kept = await svc.responses.create({ model: "svc/echo", user: "alice", input: "keep me" });
    expect((await svc.responses.retrieve(kept.id)).output).toEqual(kept.output);
  });
});
