import type { Job, RuntimeAdvert } from "@svc/contract";
import { failed, type JobContext, type Runtime } from "./runtime.js";
import { runNdjson } from "./ndjson-process.js";

interface Item {
  type?: string;
  text?: string;
  command?: string;
  exit_code?: number;
  changes?: { path: string; kind: string }[];
  tool?: string;
  server?: string;
  message?: string;
}

/**
 * Codex on the user's own subscription: `codex exec --json`, in the user's
 * working folder only. Exec asks no approvals (its sandbox decides), so the
 * service relays what it did. Unknown event kinds are skipped.
 */
export class CodexRuntime implements Runtime {
  constructor(
    readonly advert: RuntimeAdvert,
    private readonly command: string,
    private readonly workdir: string,
  ) {}

  async run(job: Job, ctx: JobContext): Promise<void> {
    if (job.kind !== "agent_run") return ctx.emit(failed("unsupported_job", `codex runs whole agent runs, not ${job.kind}.`));
    const args = ["exec", "--json", "--cd", this.workdir, "--skip-git-repo-check", ...(job.model ? ["--model", job.model] : []), job.prompt];
    let output = "";
    const usage = { inputTokens: 0, outputTokens: 0 };
    let failure: { code: string; message: string } | null = null;
    const { exited } = runNdjson(this.command, args, this.workdir, ctx.signal, (line) => {
      const item = (line.item ?? {}) as Item;
      switch (line.type) {
        case "item.completed":
          if (item.type === "agent_message" && item.text) {
            output += (output ? "\n" : "") + item.text;
            ctx.emit({ type: "text_delta", text: item.text });
          } else if (item.type === "command_execution") {
            ctx.emit({ type: "activity", summary: `ran ${item.command} (exit ${item.exit_code ?? "?"})`, detail: item });
          } else if (item.type === "file_change") {
            ctx.emit({ type: "activity", summary: `changed ${(item.changes ?? []).map((c) => `${c.kind} ${c.path}`).join(", ")}`, detail: item });
          } else if (item.type === "mcp_tool_call") {
            ctx.emit({ type: "activity", summary: `called ${item.server}/${item.tool}`, detail: item });
          } else if (item.type === "error") {
            ctx.emit({ type: "activity", summary: `error: ${item.message}`, detail: item });
          }
          return;
        case "turn.completed": {
          const u = (line.usage ?? {}) as { input_tokens?: number; output_tokens?: number };
          usage.inputTokens += u.input_tokens ?? 0;
          usage.outputTokens += u.output_tokens ?? 0;
          return;
        }
        case "turn.failed":
          failure = { code: "turn_failed", message: String((line.error as { message?: string } | undefined)?.message ?? "the turn failed") };
          return;
        case "error":
          failure = { code: "runtime_error", message: String(line.message ?? "codex reported an error") };
          return;
      }
    });
    const { code, stderr } = await exited;
    if (ctx.signal.aborted) return ctx.emit(failed("cancelled", "The job was cancelled."));
    if (failure) return ctx.emit(failed((failure as { code: string }).code, (failure as { message: string }).message));
    if (code !== 0) return ctx.emit(failed("runtime_error", `codex exited (${code})${stderr ? `: ${stderr.trim().slice(-500)}` : ""}`));
    ctx.emit({ type: "done", finishReason: "end_turn", output, usage });
  }
}
