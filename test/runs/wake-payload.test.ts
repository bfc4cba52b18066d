import { describe, expect, it } from "vitest";
import { readWake, wakePayload } from "../../server/runs/engine.js";

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
