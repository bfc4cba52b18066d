import { describe, expect, it } from "vitest";
import { pino } from "pino";
import { NoRespondersError, RequestError, TimeoutError } from "@nats-io/transport-node";
import { JetStreamApiError } from "@nats-io/jetstream";
import { BusOutage, BusUnavailable, isLinkFailure } from "../../server/bus/outage.js";
import { pollUntil } from "../helpers/process.js";

/**
 * The run bus's outage record (`server/bus/outage.ts`) on its own, with the NATS client's real errors
 * and a probe the test answers: one line when an outage begins and one when it ends, whatever fails in
 * between; reads refused at once meanwhile. `run-bus.test.ts` checks the same with a real NATS server
 * stopped and started again.
 */

function recorded(ping: () => Promise<unknown> = async () => {}) {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ base: undefined }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  let backs = 0;
  const outage = new BusOutage(ping, log, () => backs++, 20);
  return {
    outage,
    lines,
    /** What was said, each line's words before its colon. */
    said: () => lines.map((l) => String(l.msg).replace(/:.*/, "")),
    backs: () => backs,
  };
}

const timeout = () => new TimeoutError();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("the run bus's outage record", () => {
  it("the link lost: one line; calls timing out meanwhile, before or after the reconnect, and a probe refused while JetStream is not back are the same outage; one line when a call gets through", async () => {
    let ready = false;
    const probes: boolean[] = [];
    const r = recorded(async () => {
      probes.push(ready);
      if (!ready) throw new RequestError("no responders", { cause: new NoRespondersError("$JS.API.STREAM.INFO.svc_runs") });
    });
    const sentBefore = r.outage.now(); // a publish sent before the link dropped, waiting for its acknowledgement
    r.outage.linkLost("disconnected from 127.0.0.1:4222");
    for (let i = 0; i < 3; i++) r.outage.linkLost("reconnecting");
    expect(r.outage.failed(timeout(), sentBefore)).toBe(true);
    const sentDuring = r.outage.now();
    expect(r.said()).toEqual(["NATS unreachable"]);
    expect(r.lines[0]).toMatchObject({ level: 40, reason: "disconnected from 127.0.0.1:4222" });
    // Reconnected, JetStream not answering yet: the probe is refused (at once, then every probeMs), publishes sent during the outage time out now.
    r.outage.linkBack();
    await pollUntil(async () => probes.length, (n) => n >= 2, 2_000, "probes after the reconnect");
    expect(r.outage.failed(timeout(), sentDuring)).toBe(true);
    expect(r.outage.failed(timeout(), r.outage.now())).toBe(true);
    // A call that got through before JetStream is back? None can; one begun before the outage does not end it either.
    r.outage.succeeded(sentBefore);
    expect(r.outage.active).toBe(true);
    expect(r.said()).toEqual(["NATS unreachable"]);
    expect(r.backs()).toBe(0);
    ready = true;
    await pollUntil(async () => r.outage.active, (a) => !a, 2_000, "the outage's end");
    expect(r.said()).toEqual(["NATS unreachable", "NATS reachable again"]);
    expect(r.lines[1]).toMatchObject({ level: 30, failed: 3, refused: 0 });
    expect(r.lines[1].outageMs as number).toBeGreaterThanOrEqual(0);
    expect(r.backs()).toBe(1);
    // A publish sent during the outage, timing out just after its end: that outage's, not a new one.
    expect(r.outage.failed(timeout(), sentDuring)).toBe(true);
    expect(r.outage.active).toBe(false);
    expect(r.said()).toHaveLength(2);
    // Control: a call begun after the end that times out is a new outage, said once, and ended by the next call through.
    const after = r.outage.now();
    expect(r.outage.failed(timeout(), after)).toBe(true);
    expect(r.outage.failed(timeout(), r.outage.now())).toBe(true);
    const next = r.outage.now();
    r.outage.succeeded(next);
    expect(r.said()).toEqual(["NATS unreachable", "NATS reachable again", "NATS unreachable", "NATS reachable again"]);
    expect(r.lines[2]).toMatchObject({ code: "TimeoutError" });
    expect(r.backs()).toBe(2);
  });

  it("known away, a read is refused at once (503 bus_unavailable), and one in flight when the link drops is refused then; up, neither is", async () => {
    const r = recorded();
    expect(() => r.outage.check("reading run_1")).not.toThrow();
    // Control: up, a read in flight settles with its answer.
    await expect(r.outage.race(Promise.resolve("events"), "reading run_1")).resolves.toBe("events");
    const hanging = r.outage.race(new Promise<never>(() => {}), "reading run_1");
    const lostAt = performance.now();
    r.outage.linkLost("disconnected from 127.0.0.1:4222");
    const err = await hanging.catch((e: unknown) => e);
    expect(performance.now() - lostAt).toBeLessThan(50);
    expect(err).toBeInstanceOf(BusUnavailable);
    expect((err as BusUnavailable).code).toBe("bus_unavailable");
    const t = performance.now();
    expect(() => r.outage.check("reading run_1")).toThrow(BusUnavailable);
    expect(performance.now() - t).toBeLessThan(5);
    r.outage.linkBack();
    await pollUntil(async () => r.outage.active, (a) => !a, 2_000, "the outage's end");
    // The end says how many reads were refused meanwhile (the one in flight, the one checked).
    expect(r.lines[1]).toMatchObject({ refused: 2, failed: 0 });
    // Back: reads go through again.
    await expect(r.outage.race(Promise.resolve("events"), "reading run_1")).resolves.toBe("events");
    expect(() => r.outage.check("reading run_1")).not.toThrow();
  });

  it("a call failing for the link's sake while the client thinks it is connected begins an outage, probed until JetStream answers; a call failing for its own sake is no outage", async () => {
    let refusals = 2;
    const r = recorded(async () => {
      if (refusals-- > 0) throw new JetStreamApiError({ code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" });
    });
    expect(r.outage.failed(new JetStreamApiError({ code: 400, err_code: 10071, description: "wrong last sequence" }), r.outage.now())).toBe(false);
    expect(r.outage.failed(new Error("boom"), r.outage.now())).toBe(false);
    expect(r.said()).toEqual([]);
    expect(r.outage.failed(timeout(), r.outage.now())).toBe(true);
    expect(r.said()).toEqual(["NATS unreachable"]);
    await pollUntil(async () => r.outage.active, (a) => !a, 2_000, "the outage's end");
    expect(refusals).toBeLessThan(0);
    expect(r.said()).toEqual(["NATS unreachable", "NATS reachable again"]);
  });

  it("what is the link's failure: the client's time-outs, no responders, a lost connection, JetStream's 503 and 408, socket errors; not JetStream's other answers nor anything else", () => {
    const link = [
      new TimeoutError(),
      new RequestError("no responders", { cause: new NoRespondersError("$JS.API.DIRECT.GET.svc_runs") }),
      new JetStreamApiError({ code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" }),
      Object.assign(new Error("timeout"), { name: "JetStreamStatusError", code: 408 }),
      Object.assign(new Error("no responders"), { name: "JetStreamStatusError", code: 503 }),
      Object.assign(new Error("jetstream is not enabled"), { name: "JetStreamNotEnabled" }),
      Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:4222"), { code: "ECONNREFUSED" }),
      new Error("wrapped", { cause: new TimeoutError() }),
    ];
    const own = [
      new Error("boom"),
      new JetStreamApiError({ code: 404, err_code: 10059, description: "stream not found" }),
      Object.assign(new Error("bad request"), { name: "JetStreamStatusError", code: 400 }),
      null,
      "timeout",
    ];
    expect(link.map(isLinkFailure)).toEqual(link.map(() => true));
    expect(own.map(isLinkFailure)).toEqual(own.map(() => false));
  });

  it("closed (the instance stopping): nothing more is said", async () => {
    const r = recorded();
    r.outage.close();
    r.outage.linkLost("disconnected from 127.0.0.1:4222");
    expect(r.outage.failed(timeout(), r.outage.now())).toBe(true);
    await sleep(50);
    expect(r.said()).toEqual([]);
  });
});
