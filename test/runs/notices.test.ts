import { describe, expect, it } from "vitest";
import { readEventNotice, readWake, wakePayload } from "../../server/runs/notices.js";

/**
 * What an answer's statement notifies when the run is driven on another instance
 * (`svc_run_input`): the run id and the stored answer when short, read back by the
 * driver's instance. Anything it cannot take as an answer of a known shape wakes
 * the driver to read instead (a plain run id, as a cancel sends, included).
 */
describe("a driver's wake across instances", () => {
  it("carries a short answer, tool or approval, and reads it back as sent", () => {
    const tool = { kind: "tool" as const, callId: "call_1", result: { temp: 21, nested: ["a", null] }, isError: false };
    expect(readWake(wakePayload("run_a", tool))).toEqual({ runId: "run_a", answer: tool });
    const approval = { kind: "approval" as const, approvalId: "apr_1", decision: "deny" as const, reason: "not now" };
    expect(readWake(wakePayload("run_b", approval))).toEqual({ runId: "run_b", answer: approval });
    const text = { kind: "tool" as const, callId: "call_2", result: "plain words with spaces", isError: true };
    expect(readWake(wakePayload("run_c", text))).toEqual({ runId: "run_c", answer: text });
  });

  it("leaves a long answer to be read (Postgres takes 8,000 bytes a payload)", () => {
    const payload = wakePayload("run_a", { kind: "tool", callId: "call_1", result: "x".repeat(8_000), isError: false });
    expect(payload).toBe("run_a");
    expect(readWake(payload)).toEqual({ runId: "run_a" });
    const near = wakePayload("run_a", { kind: "tool", callId: "call_1", result: "y".repeat(6_900), isError: false });
    expect(Buffer.byteLength(near)).toBeLessThan(8_000);
    expect(readWake(near).answer).toBeDefined();
  });

  it("takes nothing it does not know as an answer: the driver reads instead", () => {
    for (const bad of ["run_a {", "run_a null", "run_a 42", 'run_a {"kind":"cancel","reason":null}', 'run_a {"kind":"tool","callId":7,"result":1,"isError":false}', 'run_a {"kind":"tool","callId":"c","isError":false}', 'run_a {"kind":"approval","approvalId":"a","decision":"maybe","reason":null}']) {
      expect(readWake(bad)).toEqual({ runId: "run_a" });
    }
    expect(readWake("run_plain")).toEqual({ runId: "run_plain" });
  });
});

/**
 * What a stored step notifies (`svc_run_event`): the run, the instance that wrote it, and
 * its events when short, as the step's statement prints them (`jsonb`). Readers take only a
 * run of events of a known shape, numbered one after another; anything else makes them read.
 */
describe("a stored step's notice across instances", () => {
  const events = [
    { seq: 4, kind: "text_delta", data: { kind: "text_delta", turn: 1, text: "two words" } },
    { seq: 5, kind: "tool_call", data: { kind: "tool_call", callId: "call_1", name: "lookup", arguments: { q: 1 } } },
  ];

  it("reads the run, the writer and the events as printed by Postgres", () => {
    expect(readEventNotice(`run_a inst_b ${JSON.stringify(events)}`)).toEqual({ runId: "run_a", writer: "inst_b", events });
    // jsonb's own text: a space after each colon and comma.
    const printed = '[{"seq": 4, "data": {"kind": "text_delta", "text": "two words", "turn": 1}, "kind": "text_delta"}]';
    expect(readEventNotice(`run_a inst_b ${printed}`).events).toEqual([events[0]]);
  });

  it("reads the run and the writer only when asked to (the events parsed only where someone reads them)", () => {
    expect(readEventNotice(`run_a inst_b ${JSON.stringify(events)}`, false)).toEqual({ runId: "run_a", writer: "inst_b" });
  });

  it("without events (too long for a notification), or an older writer's notice: the readers read", () => {
    expect(readEventNotice("run_a inst_b")).toEqual({ runId: "run_a", writer: "inst_b" });
    expect(readEventNotice("run_a")).toEqual({ runId: "run_a", writer: "" });
  });

  it("takes nothing of an unknown shape, or out of order: the readers read instead", () => {
    const bad = [
      "{",
      "[]",
      "null",
      '{"seq": 1}',
      JSON.stringify([{ ...events[0], seq: 0 }]),
      JSON.stringify([{ ...events[0], seq: 1.5 }]),
      JSON.stringify([events[1], events[0]]),
      JSON.stringify([events[0], { ...events[1], seq: 7 }]),
      JSON.stringify([{ ...events[0], data: null }]),
      JSON.stringify([{ ...events[0], data: { kind: "tool_call" } }]),
      JSON.stringify([{ seq: 4, data: events[0].data }]),
    ];
    for (const text of bad) expect(readEventNotice(`run_a inst_b ${text}`)).toEqual({ runId: "run_a", writer: "inst_b" });
  });
});
