import { describe, expect, it } from "vitest";
import { WORKER_PROTOCOL_VERSION, WorkerMessage, parseFrame } from "@svc/contract";

/**
 * A job's text (`job_event` with a `text_delta`), most frames of a busy link, is checked
 * by hand in `parseFrame` instead of by the schema: it must answer exactly as the schema
 * does, for the frames it takes and for those it leaves to the schema.
 */
describe("a job's text frame, checked without the schema", () => {
  const v = WORKER_PROTOCOL_VERSION;
  const delta = (payload: unknown, extra: Record<string, unknown> = {}) => JSON.stringify({ v, type: "job_event", payload, ...extra });
  const frames: [string, string][] = [
    ["plain", delta({ jobId: "job_1", event: { type: "text_delta", text: "Hello" } })],
    ["numbered", delta({ jobId: "job_1", event: { type: "text_delta", text: "Hello" }, n: 7 })],
    ["empty text", delta({ jobId: "job_1", event: { type: "text_delta", text: "" }, n: 1 })],
    ["jobId of 128", delta({ jobId: "j".repeat(128), event: { type: "text_delta", text: "x" } })],
    ["largest n", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, n: Number.MAX_SAFE_INTEGER })],
    ["jobId of 129", delta({ jobId: "j".repeat(129), event: { type: "text_delta", text: "x" } })],
    ["n of 0", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, n: 0 })],
    ["n of 1.5", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, n: 1.5 })],
    ["n as text", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, n: "1" })],
    ["n past the safe integers", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, n: 2 ** 60 })],
    ["n null", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, n: null })],
    ["text a number", delta({ jobId: "job_1", event: { type: "text_delta", text: 5 } })],
    ["text missing", delta({ jobId: "job_1", event: { type: "text_delta" } })],
    ["jobId a number", delta({ jobId: 1, event: { type: "text_delta", text: "x" } })],
    ["jobId missing", delta({ event: { type: "text_delta", text: "x" } })],
    ["a key more in the event", delta({ jobId: "job_1", event: { type: "text_delta", text: "x", extra: true } })],
    ["a key more in the payload", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" }, extra: true })],
    ["a key more in the envelope", delta({ jobId: "job_1", event: { type: "text_delta", text: "x" } }, { extra: true })],
    ["__proto__ in the payload", `{"v":${v},"type":"job_event","payload":{"jobId":"job_1","event":{"type":"text_delta","text":"x"},"__proto__":{"n":1}}}`],
    ["__proto__ in the event", `{"v":${v},"type":"job_event","payload":{"jobId":"job_1","event":{"type":"text_delta","text":"x","__proto__":{"a":1}}}}`],
    ["payload an array", delta([{ jobId: "job_1" }])],
    ["event an array", delta({ jobId: "job_1", event: ["text_delta", "x"] })],
    ["payload null", delta(null)],
    ["another event", delta({ jobId: "job_1", event: { type: "tool_call", id: "c1", name: "t", arguments: "{}" } })],
    ["another message", JSON.stringify({ v, type: "heartbeat", payload: { busy: [] } })],
  ];

  it.each(frames)("%s: the same answer as the schema", (_, text) => {
    const got = parseFrame(WorkerMessage, text);
    const schema = WorkerMessage.safeParse(JSON.parse(text));
    expect(got.ok).toBe(schema.success);
    if (got.ok && schema.success) expect(got.message).toEqual(schema.data);
  });

  it("takes the frames it may without the schema (positive control: the schema would have put the keys in its own order)", () => {
    const text = JSON.stringify({ payload: { event: { text: "Hi", type: "text_delta" }, n: 3, jobId: "job_1" }, type: "job_event", v });
    const got = parseFrame(WorkerMessage, text);
    const schema = WorkerMessage.safeParse(JSON.parse(text));
    expect(got.ok && schema.success).toBe(true);
    if (!got.ok || !schema.success || got.message.type !== "job_event" || schema.data.type !== "job_event") throw new Error("not parsed");
    expect(got.message).toEqual(schema.data);
    expect(Object.keys(got.message.payload)).toEqual(["event", "n", "jobId"]);
    expect(Object.keys(schema.data.payload)).toEqual(["jobId", "event", "n"]);
    // A frame with a key more goes through the schema, which drops it.
    const extra = parseFrame(WorkerMessage, JSON.stringify({ payload: { event: { text: "Hi", type: "text_delta" }, jobId: "job_1", x: 1 }, type: "job_event", v }));
    expect(extra.ok && extra.message.type === "job_event" && Object.keys(extra.message.payload)).toEqual(["jobId", "event"]);
  });
});
