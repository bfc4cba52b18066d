import type { JobEvent } from "@svc/contract";
import { BRIDGE_SERVER_NAME } from "../mcp/bridge-host.js";
import { commandActivity } from "../policy/output.js";
import type { JobContext } from "./runtime.js";
import { claudeWindow, spentMessage, WindowBook } from "./usage-windows.js";

/** How Claude Code names the app's tools offered through the worker's bridge: `mcp__app__<tool>`. */
const APP_TOOL_PREFIX = `mcp__${BRIDGE_SERVER_NAME}__`;

interface ContentBlock {
  type: string;
  text?: string;
  id?: string;
  name?: string;
  input?: unknown;
  tool_use_id?: string;
  content?: unknown;
  is_error?: boolean;
}

interface Message {
  id?: string;
  model?: string;
  content?: ContentBlock[];
  usage?: ApiUsage;
}

/** Usage as the Anthropic Messages API says it (`message_start`, `message_delta`, a whole message, the CLI's `result`). */
interface ApiUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
}

/** A job event's usage. */
type Usage = Extract<JobEvent, { type: "done" }>["usage"];
type Tokens = Required<Usage>;

const KINDS = ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"] as const;
const count = (n: unknown): number => (typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0);
const tokensOf = (u: ApiUsage | undefined): Tokens => ({
  inputTokens: count(u?.input_tokens),
  outputTokens: count(u?.output_tokens),
  cacheReadTokens: count(u?.cache_read_input_tokens),
  cacheWriteTokens: count(u?.cache_creation_input_tokens),
});
const zero = (): Tokens => ({ inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 });

/**
 * Turns Claude Code's stream-json (`--output-format stream-json --verbose
 * --include-partial-messages`, 2.1.x) into job events, and answers its control
 * requests. One instance per run. Unknown kinds and subtypes are skipped: the CLI
 * adds them often.
 *
 * - Text streams token by token from `stream_event` `text_delta`s; the whole
 *   `assistant` block that follows is then not sent again. Only the main agent's
 *   text is run text: a subagent's (`parent_tool_use_id` set) is its own business.
 * - An API error arrives as a synthetic `assistant` line (`model: "<synthetic>"`,
 *   "API Error: ...") and then a `result` with `is_error: true` (its subtype still
 *   `success`): the text is never run text, the run fails with `api_error_<status>`.
 * - `system`/`api_retry` becomes an activity, so a run backing off is seen as such.
 * - Tokens are told as the API says them (`usage` events), so a run that fails or is
 *   cut off still has its calls counted: each model call's `message_start` (its input, a
 *   first output count) as a partial report, its `message_delta` (the final counts) as
 *   the call's report; a call seen only whole (an `assistant` line with no stream events,
 *   the CLI's non-streaming fallback) by that message's usage. Subagents' calls count
 *   too. The `assistant` lines of a streamed call carry only its start's usage: not used.
 *   The end its `result` line makes (`done`, or `failed` with a `usage`) carries the larger
 *   of the CLI's totals and the calls' sum, kind by kind (an interrupted call is in the
 *   sum, not in the result).
 * - Commands (`Bash`) are reported once their result is in, shaped by the user's
 *   `commandOutput` policy; other tools as `uses <Tool>`. The app's own tools
 *   (`mcp__app__*`) are not: each call is already a `tool_call` from the bridge.
 */
export class ClaudeEvents {
  /** Messages whose text came as deltas: their whole blocks are not sent again. */
  private readonly streamed = new Set<string>();
  /** The message whose stream events are arriving (its id, from `message_start`). */
  private currentMessage = "";
  /** The model call whose stream events are arriving, per agent (`""` the main one, else the subagent's `parent_tool_use_id`): its message id. */
  private readonly streaming = new Map<string, string>();
  /** Each model call told so far: its usage as last said, and whether that was its final word. */
  private readonly calls = new Map<string, { usage: Tokens; final: boolean }>();
  /** The CLI's own totals, from its `result` line. */
  private resultUsage: Tokens | null = null;
  /** The synthetic error text of a failed API call, for the failure's message. */
  private apiErrorText = "";
  /** Tool uses waiting for their result, by id: how to report them then. */
  private readonly commands = new Map<string, string>();
  /** Tool uses refused (denied, or their request withdrawn): nothing ran, nothing to report. */
  private readonly denied = new Set<string>();
  /** Permission requests still open (not answered, not withdrawn by the CLI): request id → the tool use it is about. */
  private readonly pending = new Map<string, string | null>();
  /** The subscription windows the CLI reported in this run (`rate_limit_event`, on a subscription login only). */
  private readonly windows = new WindowBook();
  /** The API refused a call because a subscription window is spent (the synthetic message's `error: "rate_limit"`). */
  private rateLimited = false;
  /** How the run ended, once the CLI said so (its `result` line): `done` or `failed`. */
  outcome: JobEvent | null = null;

  constructor(
    private readonly ctx: JobContext,
    /** Writes one control message to the CLI's stdin. */
    private readonly write: (message: unknown) => void,
  ) {}

  onLine(line: Record<string, unknown>): void {
    const topLevel = line.parent_tool_use_id === null || line.parent_tool_use_id === undefined;
    switch (line.type) {
      case "stream_event":
        this.onCallUsage((line.event ?? {}) as Record<string, unknown>, topLevel ? "" : String(line.parent_tool_use_id));
        return this.onStreamEvent((line.event ?? {}) as Record<string, unknown>, topLevel);
      case "assistant":
        if (line.error === "rate_limit" || (line.message as { error?: unknown } | undefined)?.error === "rate_limit") this.rateLimited = true;
        this.onWholeMessage((line.message ?? {}) as Message);
        return this.onAssistant((line.message ?? {}) as Message, topLevel);
      case "user":
        return this.onToolResults((line.message ?? {}) as Message, line.tool_use_result);
      case "system":
        if (line.subtype === "api_retry") this.onRetry(line);
        return;
      case "rate_limit_event": {
        // Claude Code 2.1.x, on a subscription login: one window at a time, when it changes (RUNTIMES.md D).
        const window = claudeWindow(line.rate_limit_info);
        if (window) {
          this.windows.merge([window]);
          this.ctx.reportWindows?.([window]);
        }
        return;
      }
      case "control_request":
        return this.onControlRequest(String(line.request_id ?? ""), (line.request ?? {}) as Record<string, unknown>);
      case "control_cancel_request":
        return this.onCancelRequest(String(line.request_id ?? ""));
      case "result":
        this.outcome = this.onResult(line);
        return;
    }
  }

  /** Asks Claude Code to stop the turn (a cancelled job): it withdraws its open permission requests and ends with a result. */
  interrupt(): void {
    this.write({ type: "control_request", request_id: `svc_interrupt_${Date.now()}`, request: { subtype: "interrupt" } });
  }

  /** The job's usage so far: the larger of the CLI's totals (once its `result` came) and the sum of the calls told, kind by kind. */
  private usage(): Usage {
    const sum = zero();
    for (const { usage } of this.calls.values()) for (const k of KINDS) sum[k] += usage[k];
    if (this.resultUsage) for (const k of KINDS) sum[k] = Math.max(sum[k], this.resultUsage[k]);
    return sum;
  }

  /** A model call's usage from its stream: what `message_start` said (partial), then `message_delta`'s final counts (cumulative, as Anthropic sends them). */
  private onCallUsage(event: Record<string, unknown>, agent: string): void {
    if (event.type === "message_start") {
      const message = (event.message ?? {}) as Message;
      const id = String(message.id ?? "");
      if (!id || this.calls.has(id)) return;
      this.streaming.set(agent, id);
      this.tell(id, tokensOf(message.usage), false);
    } else if (event.type === "message_delta") {
      const id = this.streaming.get(agent);
      const call = id ? this.calls.get(id) : undefined;
      if (!id || !call || call.final) return;
      this.streaming.delete(agent);
      // Only what the delta says replaces what the start said; never less than was said.
      const said = (event.usage ?? {}) as ApiUsage;
      const delta = tokensOf(said);
      const usage = { ...call.usage };
      for (const [k, field] of [["inputTokens", "input_tokens"], ["outputTokens", "output_tokens"], ["cacheReadTokens", "cache_read_input_tokens"], ["cacheWriteTokens", "cache_creation_input_tokens"]] as const) {
        if (typeof said[field] === "number") usage[k] = Math.max(usage[k], delta[k]);
      }
      this.tell(id, usage, true);
    }
  }

  /** A message seen whole with no stream events of its own (the CLI's non-streaming fallback): its usage is final. */
  private onWholeMessage(message: Message): void {
    if (message.model === "<synthetic>" || !message.id || !message.usage || this.calls.has(message.id)) return;
    this.tell(message.id, tokensOf(message.usage), true);
  }

  private tell(call: string, usage: Tokens, final: boolean): void {
    this.calls.set(call, { usage, final });
    // A call that used nothing (yet) need not be told; its later report will be.
    if (!KINDS.some((k) => usage[k] > 0)) return;
    this.ctx.emit({ type: "usage", call: call.slice(0, 128), usage, ...(final ? {} : { partial: true }) });
  }

  private onStreamEvent(event: Record<string, unknown>, topLevel: boolean): void {
    if (!topLevel) return;
    if (event.type === "message_start") this.currentMessage = String((event.message as Message | undefined)?.id ?? "");
    if (event.type !== "content_block_delta") return;
    const delta = (event.delta ?? {}) as { type?: string; text?: string };
    if (delta.type !== "text_delta" || !delta.text) return;
    this.streamed.add(this.currentMessage);
    this.ctx.emit({ type: "text_delta", text: delta.text });
  }

  private onAssistant(message: Message, topLevel: boolean): void {
    const content = message.content ?? [];
    if (message.model === "<synthetic>") {
      this.apiErrorText = content.map((b) => b.text ?? "").join("");
      return;
    }
    for (const block of content) {
      if (block.type === "text" && block.text && topLevel && !this.streamed.has(message.id ?? "")) this.ctx.emit({ type: "text_delta", text: block.text });
      if (block.type !== "tool_use" || !block.name || block.name.startsWith(APP_TOOL_PREFIX)) continue;
      const input = (block.input ?? {}) as { command?: unknown };
      if (block.name === "Bash" && block.id) this.commands.set(block.id, String(input.command ?? ""));
      else this.ctx.emit({ type: "activity", summary: `uses ${block.name}`, detail: block.input });
    }
  }

  /** A command's result: what it printed and how it ended, as the user's policy lets the app see it. */
  private onToolResults(message: Message, toolUseResult: unknown): void {
    for (const block of message.content ?? []) {
      if (block.type !== "tool_result" || !block.tool_use_id) continue;
      const command = this.commands.get(block.tool_use_id);
      if (command === undefined) continue;
      this.commands.delete(block.tool_use_id);
      if (this.denied.delete(block.tool_use_id)) continue;
      const text = typeof block.content === "string" ? block.content : Array.isArray(block.content) ? (block.content as ContentBlock[]).map((c) => c.text ?? "").join("") : "";
      let output = text;
      let exitCode: number | null = null;
      const ran = toolUseResult as { stdout?: unknown; stderr?: unknown } | undefined;
      if (!block.is_error) {
        exitCode = 0;
        if (ran && typeof ran === "object" && typeof ran.stdout === "string") output = [ran.stdout, ran.stderr].filter((s) => typeof s === "string" && s).join("\n");
      } else {
        // A failed command's result starts "Exit code N" (Claude Code 2.1.x); anything else (a timeout) has no code.
        const m = /^Exit code (\d+)\n?/.exec(text);
        if (m) ((exitCode = Number(m[1])), (output = text.slice(m[0].length)));
      }
      this.ctx.emit({ type: "activity", ...commandActivity(this.ctx.commandOutput, { command, output, exitCode }) });
    }
  }

  private onRetry(line: Record<string, unknown>): void {
    const attempt = Number(line.attempt ?? 0);
    const maxRetries = Number(line.max_retries ?? 0);
    const status = line.error_status ?? null;
    const delayMs = Math.round(Number(line.retry_delay_ms ?? 0));
    const why = status === null ? String(line.error ?? "connection error") : `HTTP ${status}`;
    this.ctx.emit({
      type: "activity",
      summary: `the model API failed (${why}): retry ${attempt} of ${maxRetries} in ${(delayMs / 1000).toFixed(1)} s`,
      detail: { attempt, maxRetries, errorStatus: status, error: line.error ?? null, retryDelayMs: delayMs },
    });
  }

  private onControlRequest(requestId: string, req: Record<string, unknown>): void {
    if (req.subtype !== "can_use_tool") {
      this.write({ type: "control_response", response: { subtype: "error", request_id: requestId, error: `unsupported request ${String(req.subtype)}` } });
      return;
    }
    const input = req.input ?? {};
    const toolUseId = typeof req.tool_use_id === "string" ? req.tool_use_id : null;
    const description = [req.description, req.title, req.decision_reason].find((d): d is string => typeof d === "string" && d.length > 0);
    this.pending.set(requestId, toolUseId);
    const asked = this.ctx.askPermission({ requestId, tool: String(req.tool_name ?? "unknown"), input, description });
    // Asking failed: a denial (nothing runs that no one allowed), so the CLI does not wait forever.
    void asked.catch((err: Error) => ({ allow: false, message: `The permission request failed: ${err.message}` })).then(({ allow, message }) => {
      // Withdrawn by the CLI meanwhile: it no longer waits for an answer.
      if (!this.pending.delete(requestId)) return;
      if (!allow && toolUseId) this.denied.add(toolUseId);
      const response = allow ? { behavior: "allow", updatedInput: input } : { behavior: "deny", message: message ?? "Denied by the user." };
      this.write({ type: "control_response", response: { subtype: "success", request_id: requestId, response } });
    });
  }

  private onCancelRequest(requestId: string): void {
    if (!this.pending.has(requestId)) return;
    const toolUseId = this.pending.get(requestId);
    this.pending.delete(requestId);
    if (toolUseId) this.denied.add(toolUseId);
    this.ctx.withdrawPermission(requestId);
  }

  private onResult(line: Record<string, unknown>): JobEvent {
    this.resultUsage = tokensOf((line.usage ?? {}) as ApiUsage);
    const usage = this.usage();
    if (!line.is_error && line.subtype === "success") {
      return { type: "done", finishReason: String(line.stop_reason ?? "end_turn"), output: String(line.result ?? ""), usage };
    }
    const status = typeof line.api_error_status === "number" ? line.api_error_status : null;
    const errors = Array.isArray(line.errors) ? (line.errors as unknown[]).map(String).join("; ") : "";
    // A call refused because the subscription's window is spent: the CLI said the window `rejected` (and the API answered 429).
    const spent = this.windows.spent();
    if (spent && (status === 429 || this.rateLimited)) {
      return { type: "failed", code: "usage_limit_reached", message: spentMessage("Claude Code", spent, errors || this.apiErrorText || undefined), usage };
    }
    const code = status !== null ? `api_error_${status}` : line.subtype && line.subtype !== "success" ? String(line.subtype) : "claude_error";
    const message = errors || this.apiErrorText || (typeof line.result === "string" ? line.result : "") || "Claude Code stopped with an error.";
    return { type: "failed", code, message, usage };
  }
}
