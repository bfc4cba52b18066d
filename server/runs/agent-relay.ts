import type { JobEvent } from "@svc/contract";
import { randomId } from "../crypto.js";
import { RunDriver, RunStop, type RunEnd } from "./driver.js";
import { DEFAULT_ANSWER_TIMEOUT_MS } from "./model-loop.js";

/**
 * A run on an agent runtime (a coding-agent CLI on the user's machine): the CLI
 * runs its own loop in the user's working folder; the service relays what it
 * says and does, and turns each of its permission requests into an approval
 * request answered by the app. Its loop lives in the CLI process, so a run whose
 * driving instance was lost cannot be resumed: it fails with a clear reason.
 */
export class AgentRunDriver extends RunDriver {
  private text = "";
  /** Open permission requests: approval id → the CLI's request id, and the deadline. */
  private readonly asked = new Map<string, { requestId: string; deadline: number }>();

  protected override partialOutput(): string {
    return this.text;
  }

  protected async loop(): Promise<RunEnd> {
    if (this.seq > 1) throw new RunStop("worker_lost", "worker_lost", "The instance driving this agent run was lost; an agent CLI's own loop cannot be resumed elsewhere.");
    const approvalMs = this.run.request.limits?.approvalTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS;
    const result = new Promise<Extract<JobEvent, { type: "done" }>>((resolve, reject) => {
      this.dispatch({ kind: "agent_run", runtime: this.run.runtime_name!, prompt: this.run.request.prompt, ...(this.run.model !== "auto" && this.run.model !== this.run.runtime_name ? { model: this.run.model } : {}) }, (e) => {
        switch (e.type) {
          case "text_delta":
            this.text += e.text;
            return this.emitText(1, e.text);
          case "activity":
            this.emit("activity", { summary: e.summary, ...(e.detail !== undefined ? { detail: e.detail } : {}) });
            return this.flushSoon();
          case "permission_request": {
            const approvalId = randomId("apr_", 20);
            const deadline = this.deps.clock.now().getTime() + approvalMs;
            const deadlineAt = new Date(deadline).toISOString();
            this.asked.set(approvalId, { requestId: e.requestId, deadline });
            this.emit("approval_request", { approvalId, what: "permission", tool: e.tool, arguments: e.input, ...(e.description ? { description: e.description } : {}), deadlineAt });
            const request = { requestId: e.requestId, tool: e.tool, arguments: e.input };
            return void this.flush({ status: "waiting" }, { approvals: [{ approval_id: approvalId, kind: "permission", request, deadline_at: deadlineAt }] }).catch(() => {});
          }
          case "done":
            return resolve(e);
          case "failed":
            if (e.code === "worker_lost" && !this.stoppedHere()) {
              // The worker stops the CLI when its link drops, so nothing runs unattended; there is nothing to wait for.
              return reject(new RunStop("worker_lost", "worker_lost", "The link to the user's machine was lost while its agent CLI ran; an agent CLI's own loop cannot be resumed, so the run ends."));
            }
            return reject(this.failure(e));
        }
      });
    });
    result.catch(() => {});
    let finished = false;
    // While the CLI works: decisions are passed on as they come, deadlines kept, a cancel stops it.
    const relay = (async () => {
      while (!finished) {
        const now = this.deps.clock.now().getTime();
        const next = Math.min(...[...this.asked.values()].map((a) => a.deadline), now + this.deps.pollMs);
        await this.waitWake(next - now);
        if (finished) return;
        const inputs = await this.inputs();
        for (const [approvalId, open] of this.asked) {
          const a = inputs.approvals.get(approvalId);
          if (a?.answered) {
            this.asked.delete(approvalId);
            this.job?.answerPermission(open.requestId, a.decision === "allow", a.reason ?? (a.decision === "allow" ? undefined : "The app denied this."));
            if (this.asked.size === 0) await this.flush({ status: "running" });
          } else if (a && open.deadline <= this.deps.clock.now().getTime()) {
            throw new RunStop("approval_timeout", "approval_timeout", `No decision on approval ${approvalId} in time.`);
          }
        }
      }
    })();
    try {
      const done = await Promise.race([result, relay.then(() => result)]);
      const output = done.output || this.text;
      const { row } = this.usage(1, done.usage.inputTokens, done.usage.outputTokens);
      return {
        output,
        stopReason: done.finishReason,
        patch: { turns: 1, addInputTokens: done.usage.inputTokens, addOutputTokens: done.usage.outputTokens },
        extra: { usage: [row] },
      };
    } finally {
      finished = true;
      this.wake();
    }
  }
}
