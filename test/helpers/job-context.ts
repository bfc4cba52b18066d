import type { JobEvent, UsageWindow } from "@svc/contract";
import type { JobContext } from "../../worker/src/runtimes/runtime.js";

/**
 * What a runtime needs to run one job outside the worker, unconfined, with `env` as the CLI's whole
 * environment: it denies every permission and fails every app tool, and records what the runtime
 * emitted and every set of subscription windows it reported.
 */
export function recordingJobContext(env: Record<string, string>): { ctx: JobContext; events: JobEvent[]; windows: UsageWindow[][] } {
  const events: JobEvent[] = [];
  const windows: UsageWindow[][] = [];
  const ctx: JobContext = {
    emit: (e) => events.push(e),
    signal: new AbortController().signal,
    askPermission: async () => ({ allow: false }),
    withdrawPermission: () => {},
    callTool: async () => ({ output: "", isError: true }),
    launch: async (p) => ({ command: p.command, args: p.args, cwd: p.cwd, env: { ...env, ...p.env } }),
    commandOutput: "none",
    allowedEnv: env,
    sandbox: null,
    reportWindows: (w) => windows.push(w),
  };
  return { ctx, events, windows };
}
