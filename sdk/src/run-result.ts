import type { RunEvent } from "./wire.js";
import type { RunResult } from "./types.js";
import type { RunRoute } from "./wire.js";

type Final = Extract<RunEvent, { kind: "run_completed" | "run_failed" | "run_cancelled" }>;

/** Folds a run's events into its `RunResult`. */
export class RunTally {
  route: RunRoute | null = null;
  machineId: string | null = null;
  runtime: string | null = null;
  final: Final | null = null;
  /** Text per turn: a restarted turn's text is dropped, as the `turn_restarted` event asks. */
  private readonly text = new Map<number, string>();
  /** Usage per turn, for runs that end without a total (failed, cancelled). */
  private readonly usage = new Map<number, { inputTokens: number; outputTokens: number }>();

  add(event: RunEvent): void {
    switch (event.kind) {
      case "run_started":
        ({ route: this.route, machineId: this.machineId, runtime: this.runtime } = event);
        break;
      case "text_delta":
        this.text.set(event.turn, (this.text.get(event.turn) ?? "") + event.text);
        break;
      case "turn_restarted":
        this.text.delete(event.turn);
        break;
      case "usage":
        this.usage.set(event.turn, { inputTokens: event.usage.inputTokens, outputTokens: event.usage.outputTokens });
        break;
      case "run_completed":
      case "run_failed":
      case "run_cancelled":
        this.final = event;
        break;
    }
  }

  /** Whether `route`, `machineId` and `runtime` are known (the stream had `run_started`). */
  get started(): boolean {
    return this.route !== null;
  }

  result(runId: string): RunResult {
    const f = this.final;
    if (!f) throw new Error("svc: the run has not ended.");
    const where = { route: this.route, machineId: this.machineId, runtime: this.runtime };
    const summed = { inputTokens: 0, outputTokens: 0 };
    for (const u of this.usage.values()) (summed.inputTokens += u.inputTokens), (summed.outputTokens += u.outputTokens);
    const streamed = [...this.text.entries()].sort(([a], [b]) => a - b).map(([, t]) => t).join("");
    switch (f.kind) {
      case "run_completed":
        return { runId, status: "completed", output: f.output, usage: { inputTokens: f.usage.inputTokens, outputTokens: f.usage.outputTokens }, ...where, stopReason: f.stopReason };
      case "run_failed":
        return { runId, status: "failed", output: streamed, usage: summed, ...where, stopReason: f.stopReason, error: f.error };
      case "run_cancelled":
        return { runId, status: "cancelled", output: f.output, usage: summed, ...where, stopReason: "cancelled" };
    }
  }
}
