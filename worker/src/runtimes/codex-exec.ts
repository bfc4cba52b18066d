import type { Job } from "@svc/contract";
import { commandActivity } from "../policy/output.js";
import type { CodexSandboxMode } from "./codex.js";
import { runNdjson } from "./ndjson-process.js";
import { failed, type JobContext } from "./runtime.js";

interface Item {
  type?: string;
  text?: string;
  command?: string;
  aggregated_output?: string;
  exit_code?: number;
  changes?: { path: string; kind: string }[];
  tool?: string;
  server?: string;
  message?: string;
}

/**
 * The fallback for a Codex without `app-server`: `codex exec --json`, which asks
 * no approvals (its pinned sandbox decides: `workspace-write`, or none inside
 * the worker's own, see `codexSandbox` in codex.ts) and offers no app tools.
 * Its stdin is closed at once (`exec` otherwise waits for more input forever)
 * and the prompt comes after `--` (a prompt starting with `--` is not a flag).
 */
export async function runCodexExec(
  command: string,
  workdir: string,
  job: Extract<Job, { kind: "agent_run" }>,
  ctx: JobContext,
  o: { writable: string[]; modelApis: string[]; model?: string; overrides: string[]; sandboxMode: CodexSandboxMode },
): Promise<void> {
  const args = ["exec", "--json", "--cd", workdir, "--skip-git-repo-check", "--sandbox", o.sandboxMode, ...o.overrides.flatMap((c) => ["-c", c]), ...(o.model ? ["--model", o.model] : []), "--", job.prompt];
  let output = "";
  const usage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 };
  let failure: { code: string; message: string } | null = null;
  const launched = await ctx.launch({ command, args, cwd: workdir, env: {}, writable: o.writable, modelApis: o.modelApis });
  const { child, exited } = runNdjson(launched, ctx.signal, (line) => {
    const item = (line.item ?? {}) as Item;
    switch (line.type) {
      case "item.completed":
        if (item.type === "agent_message" && item.text) {
          output += (output ? "\n" : "") + item.text;
          ctx.emit({ type: "text_delta", text: item.text });
        } else if (item.type === "command_execution") {
          ctx.emit({ type: "activity", ...commandActivity(ctx.commandOutput, { command: item.command ?? "", output: item.aggregated_output, exitCode: item.exit_code ?? null }) });
        } else if (item.type === "file_change") {
          ctx.emit({ type: "activity", summary: `changed ${(item.changes ?? []).map((c) => `${c.kind} ${c.path}`).join(", ")}` });
        } else if (item.type === "mcp_tool_call") {
          ctx.emit({ type: "activity", summary: `called ${item.server}/${item.tool}` });
        }
        return;
      case "turn.completed": {
        const u = (line.usage ?? {}) as { input_tokens?: number; cached_input_tokens?: number; cache_write_input_tokens?: number; output_tokens?: number };
        const cached = u.cached_input_tokens ?? 0;
        const written = u.cache_write_input_tokens ?? 0;
        usage.inputTokens += Math.max(0, (u.input_tokens ?? 0) - cached - written);
        usage.cacheReadTokens += cached;
        usage.cacheWriteTokens += written;
        usage.outputTokens += u.output_tokens ?? 0;
        return;
      }
      case "turn.failed":
        failure = { code: "runtime_error", message: String((line.error as { message?: string } | undefined)?.message ?? "the turn failed") };
        return;
      case "error":
        failure = { code: "runtime_error", message: String(line.message ?? "codex reported an error") };
        return;
    }
  });
  child.stdin.end();
  const { code, stderr } = await exited;
  if (ctx.signal.aborted) return ctx.emit(failed("cancelled", "The job was cancelled."));
  if (failure) return ctx.emit(failed((failure as { code: string }).code, (failure as { message: string }).message));
  if (code !== 0) return ctx.emit(failed("runtime_error", `codex exited (${code})${stderr ? `: ${stderr.trim().slice(-500)}` : ""}`));
  ctx.emit({ type: "done", finishReason: "end_turn", output, usage });
}
