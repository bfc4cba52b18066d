import type { Job, RuntimeAdvert } from "@svc/contract";
import { failed, type JobContext, type Runtime } from "./runtime.js";
import { runNdjson } from "./ndjson-process.js";

interface ContentBlock {
  type: string;
  text?: string;
  name?: string;
  input?: unknown;
}

/**
 * Claude Code on the user's own subscription: `claude -p` with stream-json in
 * and out, its permission requests through the stdio control protocol (each one
 * asked of the app, the answer written back), in the user's working folder only.
 * Unknown event kinds are skipped: the CLI adds kinds often.
 */
export class ClaudeCodeRuntime implements Runtime {
  constructor(
    readonly advert: RuntimeAdvert,
    private readonly command: string,
    private readonly workdir: string,
  ) {}

  async run(job: Job, ctx: JobContext): Promise<void> {
    if (job.kind !== "agent_run") return ctx.emit(failed("unsupported_job", `claude-code runs whole agent runs, not ${job.kind}.`));
    const args = ["-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json", "--permission-prompt-tool", "stdio", ...(job.model ? ["--model", job.model] : [])];
    let finished = false;
    const { child, exited } = runNdjson(this.command, args, this.workdir, ctx.signal, (line, proc) => {
      switch (line.type) {
        case "assistant": {
          const content = ((line.message as { content?: ContentBlock[] } | undefined)?.content ?? []) as ContentBlock[];
          for (const block of content) {
            if (block.type === "text" && block.text) ctx.emit({ type: "text_delta", text: block.text });
            if (block.type === "tool_use") ctx.emit({ type: "activity", summary: `uses ${block.name}`, detail: block.input });
          }
          return;
        }
        case "control_request": {
          const requestId = String(line.request_id ?? "");
          const req = (line.request ?? {}) as { subtype?: string; tool_name?: string; input?: unknown; description?: string; title?: string; decision_reason?: string };
          if (req.subtype !== "can_use_tool") {
            proc.stdin.write(`${JSON.stringify({ type: "control_response", response: { subtype: "error", request_id: requestId, error: `unsupported request ${req.subtype}` } })}\n`);
            return;
          }
          const input = req.input ?? {};
          void ctx
            .askPermission({ requestId, tool: req.tool_name ?? "unknown", input, description: req.description ?? req.title ?? req.decision_reason })
            .then(({ allow, message }) => {
              const response = allow ? { behavior: "allow", updatedInput: input } : { behavior: "deny", message: message ?? "Denied by the user." };
              proc.stdin.write(`${JSON.stringify({ type: "control_response", response: { subtype: "success", request_id: requestId, response } })}\n`);
            });
          return;
        }
        case "result": {
          finished = true;
          const usage = (line.usage ?? {}) as { input_tokens?: number; output_tokens?: number };
          const tokens = { inputTokens: usage.input_tokens ?? 0, outputTokens: usage.output_tokens ?? 0 };
          if (line.subtype === "success" && !line.is_error) {
            ctx.emit({ type: "done", finishReason: String(line.stop_reason ?? "end_turn"), output: String(line.result ?? ""), usage: tokens });
          } else {
            const errors = Array.isArray(line.errors) ? (line.errors as unknown[]).join("; ") : String(line.result ?? "");
            ctx.emit(failed(String(line.subtype ?? "error"), errors || "Claude Code stopped with an error."));
          }
          proc.stdin.end();
          return;
        }
      }
    });
    child.stdin.write(`${JSON.stringify({ type: "user", message: { role: "user", content: [{ type: "text", text: job.prompt }] }, parent_tool_use_id: null })}\n`);
    const { code, stderr } = await exited;
    if (finished) return;
    if (ctx.signal.aborted) return ctx.emit(failed("cancelled", "The job was cancelled."));
    ctx.emit(failed("runtime_error", `claude exited (${code}) without a result${stderr ? `: ${stderr.trim().slice(-500)}` : ""}`));
  }
}
