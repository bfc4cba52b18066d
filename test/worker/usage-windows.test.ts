import { afterEach, describe, expect, it } from "vitest";
import { WebSocketServer, type WebSocket } from "ws";
import { serverMessage, WORKER_FEATURES, WorkerMessage, parseFrame, type JobEvent, type UsageWindow } from "@svc/contract";
import { ClaudeEvents } from "../../worker/src/runtimes/claude-events.js";
import { claudeWindow, codexWindows, WindowBook } from "../../worker/src/runtimes/usage-windows.js";
import { serve } from "../../worker/src/connection.js";
import type { JobContext, Runtime } from "../../worker/src/runtimes/runtime.js";

/**
 * The worker's side of subscription windows (issue 29): what each CLI reports,
 * parsed into one shape per runtime, a job cut off by a spent window failing
 * `usage_limit_reached` with the reset time, and the `runtime_limits` message
 * sent only to a service whose `welcome` lists the feature.
 *
 * The parsers are fed the CLIs' messages as RUNTIMES.md section D recorded them
 * (Claude Code 2.1.197's `rate_limit_event`) and as Codex 0.169's `app-server
 * generate-ts` declares them (`RateLimitSnapshot`, `RateLimitWindow`), including
 * shapes the stand-ins do not produce; the real CLIs against their stand-ins are
 * in test/agents/agent-claude-windows.test.ts and agent-codex-windows.test.ts.
 */

const RESET = 1795745978; // epoch seconds, as the CLIs say it
const RESET_ISO = new Date(RESET * 1000).toISOString();

function context(reported: UsageWindow[][], events: JobEvent[] = []): JobContext {
  return {
    emit: (e) => events.push(e),
    signal: new AbortController().signal,
    askPermission: async () => ({ allow: false }),
    withdrawPermission: () => {},
    callTool: async () => ({ output: "", isError: true }),
    launch: async () => {
      throw new Error("not launched here");
    },
    commandOutput: "summary",
    allowedEnv: {},
    reportWindows: (w) => reported.push(w),
  };
}

describe("Claude Code's rate_limit_event", () => {
  it("parses each status, window and utilization into the one shape", () => {
    expect(claudeWindow({ status: "allowed_warning", resetsAt: RESET, rateLimitType: "five_hour", utilization: 0.92, isUsingOverage: false })).toEqual({ window: "5h", status: "warning", usedPercent: 92, resetsAt: RESET_ISO });
    expect(claudeWindow({ status: "allowed", resetsAt: RESET, rateLimitType: "seven_day" })).toEqual({ window: "7d", status: "allowed", resetsAt: RESET_ISO });
    expect(claudeWindow({ status: "rejected", resetsAt: RESET, rateLimitType: "seven_day_opus" })).toEqual({ window: "7d_opus", status: "rejected", resetsAt: RESET_ISO });
    expect(claudeWindow({ status: "rejected", rateLimitType: "overage" })).toEqual({ window: "overage", status: "rejected" });
    // Not a window we can say: nothing.
    expect(claudeWindow({ status: "weird", rateLimitType: "five_hour" })).toBeNull();
    expect(claudeWindow(null)).toBeNull();
  });

  it("a call refused for a spent 5-hour window fails the job usage_limit_reached, naming the reset; the windows are reported as they come", () => {
    const reported: UsageWindow[][] = [];
    const events = new ClaudeEvents(context(reported), () => {});
    events.onLine({ type: "system", subtype: "init" });
    events.onLine({ type: "rate_limit_event", rate_limit_info: { status: "allowed_warning", resetsAt: RESET, rateLimitType: "five_hour", utilization: 0.92, isUsingOverage: false }, uuid: "u1", session_id: "s" });
    events.onLine({ type: "rate_limit_event", rate_limit_info: { status: "rejected", resetsAt: RESET, rateLimitType: "five_hour", isUsingOverage: false }, uuid: "u2", session_id: "s" });
    events.onLine({ type: "assistant", error: "rate_limit", message: { id: "m", model: "<synthetic>", content: [{ type: "text", text: "You've hit your session limit · resets 2:20am (UTC)" }] }, parent_tool_use_id: null });
    events.onLine({ type: "result", subtype: "success", is_error: true, api_error_status: 429, result: "You've hit your session limit · resets 2:20am (UTC)", usage: { input_tokens: 0, output_tokens: 0 } });
    expect(reported).toEqual([[{ window: "5h", status: "warning", usedPercent: 92, resetsAt: RESET_ISO }], [{ window: "5h", status: "rejected", resetsAt: RESET_ISO }]]);
    expect(events.outcome).toMatchObject({ type: "failed", code: "usage_limit_reached" });
    expect((events.outcome as { message: string }).message).toBe(`Claude Code has used its subscription's 5-hour window; it resets at ${RESET_ISO}. Claude Code said: You've hit your session limit · resets 2:20am (UTC)`);
  });

  it("control: a 429 with no spent window reported (an API key's rate limit) stays api_error_429", () => {
    const events = new ClaudeEvents(context([]), () => {});
    events.onLine({ type: "assistant", message: { id: "m", model: "<synthetic>", content: [{ type: "text", text: "API Error: 429 rate limited" }] }, parent_tool_use_id: null });
    events.onLine({ type: "result", subtype: "success", is_error: true, api_error_status: 429, usage: {} });
    expect(events.outcome).toMatchObject({ type: "failed", code: "api_error_429" });
  });
});

describe("Codex's account/rateLimits/updated", () => {
  it("parses the primary and secondary windows: used percent, length, reset; 100 % is spent", () => {
    const snapshot = {
      limitId: "codex",
      limitName: null,
      primary: { usedPercent: 42.5, windowDurationMins: 300, resetsAt: RESET },
      secondary: { usedPercent: 100, windowDurationMins: 10080, resetsAt: RESET + 86400 },
      credits: null,
      planType: "plus",
      rateLimitReachedType: "rate_limit_reached",
    };
    expect(codexWindows(snapshot)).toEqual([
      { window: "5h", status: "allowed", usedPercent: 42.5, resetsAt: RESET_ISO },
      { window: "7d", status: "rejected", usedPercent: 100, resetsAt: new Date((RESET + 86400) * 1000).toISOString() },
    ]);
    // Sparse: a window left out is not said; an odd length keeps its minutes.
    expect(codexWindows({ primary: { usedPercent: 91, windowDurationMins: 45, resetsAt: null }, secondary: null })).toEqual([{ window: "45m", status: "warning", usedPercent: 91 }]);
    expect(codexWindows(undefined)).toEqual([]);
  });

  it("the book merges sparse reports, says only what changed, and forgets a window past its reset", () => {
    const book = new WindowBook();
    const now = Date.parse("2026-11-27T00:00:00Z");
    expect(book.merge([{ window: "5h", status: "rejected", resetsAt: "2026-11-27T01:00:00.000Z" }], now)).toBe(true);
    expect(book.merge([{ window: "5h", status: "rejected", resetsAt: "2026-11-27T01:00:00.000Z" }], now)).toBe(false);
    expect(book.spent()?.window).toBe("5h");
    expect(book.merge([{ window: "7d", status: "allowed", usedPercent: 10 }], now)).toBe(true);
    expect(book.list().map((w) => w.window)).toEqual(["5h", "7d"]);
    expect(book.merge([], now + 2 * 3600_000)).toBe(true);
    expect(book.list().map((w) => w.window)).toEqual(["7d"]);
    expect(book.spent()).toBeNull();
  });
});

describe("runtime_limits on the link", () => {
  let wss: WebSocketServer | null = null;
  afterEach(() => new Promise<void>((r) => (wss ? wss.close(() => r()) : r())));

  /** A service double that welcomes with `features`, sends one agent job, and keeps every message the worker sends. */
  async function run(features: string[] | undefined): Promise<WorkerMessage[]> {
    const got: WorkerMessage[] = [];
    wss = new WebSocketServer({ port: 0 });
    await new Promise((r) => wss!.once("listening", r));
    const port = (wss.address() as { port: number }).port;
    const ended = new Promise<void>((resolve) => {
      wss!.on("connection", (socket: WebSocket) => {
        socket.on("message", (data) => {
          const parsed = parseFrame(WorkerMessage, data.toString());
          if (!parsed.ok) throw new Error(`the worker sent a bad message: ${parsed.reason}`);
          got.push(parsed.message);
          if (parsed.message.type === "hello") {
            socket.send(JSON.stringify(serverMessage("welcome", { machineId: "m", heartbeatSeconds: 10, appName: "app", ...(features ? { features } : {}) })));
            socket.send(JSON.stringify(serverMessage("job", { jobId: "job_1", job: { kind: "agent_run", runtime: "claude-code", prompt: "hi" } })));
          }
          if (parsed.message.type === "job_event" && (parsed.message.payload.event.type === "done" || parsed.message.payload.event.type === "failed")) setTimeout(resolve, 100);
        });
      });
    });
    const runtime: Runtime = {
      advert: { name: "claude-code", kind: "agent", costClass: "user_subscription", models: [], billing: "subscription" },
      run: async (_job, ctx) => {
        const window: UsageWindow = { window: "5h", status: "rejected", resetsAt: RESET_ISO };
        ctx.reportWindows?.([window]);
        ctx.reportWindows?.([window]); // said again: not sent again
        ctx.emit({ type: "failed", code: "usage_limit_reached", message: `Claude Code has used its subscription's 5-hour window; it resets at ${RESET_ISO}.` });
      },
    };
    const stop = new AbortController();
    const serving = serve({
      credentials: { server: "http://x", connectUrl: `ws://127.0.0.1:${port}`, machineId: "m", pairingToken: "pt", environment: "test" } as never,
      runtimes: [runtime],
      print: () => {},
      signal: stop.signal,
    });
    await ended;
    stop.abort();
    await serving;
    return got;
  }

  it("goes, once per change, to a service whose welcome lists runtime_limits", async () => {
    const got = await run([WORKER_FEATURES.jobUsage, WORKER_FEATURES.runtimeLimits]);
    const limits = got.filter((m) => m.type === "runtime_limits");
    expect(limits.map((m) => m.payload)).toEqual([{ runtime: "claude-code", windows: [{ window: "5h", status: "rejected", resetsAt: RESET_ISO }], updatedAt: expect.any(String) }]);
    expect(got.find((m) => m.type === "job_event")?.payload).toMatchObject({ event: { type: "failed", code: "usage_limit_reached" } });
  });

  it("never goes to an older service (no features, or not that one): only the job's end says it", async () => {
    for (const features of [undefined, [WORKER_FEATURES.jobUsage, WORKER_FEATURES.jobSpans]]) {
      const got = await run(features);
      expect(got.map((m) => m.type)).not.toContain("runtime_limits");
      expect(got.find((m) => m.type === "job_event")?.payload).toMatchObject({ event: { type: "failed", code: "usage_limit_reached" } });
      await new Promise<void>((r) => wss!.close(() => r()));
      wss = null;
    }
  });
});
