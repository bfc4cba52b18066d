import type { Readable } from "node:stream";
import type { Response } from "express";
import type { HandedBackToolCall, ResponseObject, TokenUsage } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { costClassOf, periodOf } from "../ledger/metering.js";
import { recordEchoes, type EchoRecord } from "../ledger/echo.js";
import { ensureEndUser } from "../users/end-users.js";
import { GroupCommit } from "../db/group-commit.js";
import type { StoredEvent } from "../runs/run-rows.js";
import { EventStreamWriter } from "../runs/sse.js";
import { countWords, ECHO_MODEL, parseScript, ScriptError, stepsOfTurn } from "../runs/echo-script.js";
import { itemText, type StoredItem } from "./input.js";
import { DONE_FRAME, frame, ResponseAssembler, responseIdOf, suffixOf, type ResponseHead } from "./assemble.js";
import type { ResponseRecord } from "./responses.js";

/**
 * `svc/echo` on `POST /v1/responses`: the last user message back, or, when it is
 * a `svc/echo` script (as on `POST /v1/runs`), the script's turn for this request:
 * turn k runs after the caller sent the outputs of k function calls, so an app's
 * tests drive a whole tool loop with no machine. Recorded like an echo chat
 * completion (its run, and a ledger row of cost class `free`), by group commit,
 * before it is answered; the response it gave is kept with its run.
 */
export class EchoResponder {
  private readonly records: GroupCommit<EchoRecord>;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    /** Told of each answer recorded (its run ended completed: the metrics' `svc_runs_finished_total`). */
    private readonly recorded: () => void = () => {},
  ) {
    this.records = new GroupCommit((records) => recordEchoes(this.db, records));
  }

  async respond(tenant: Tenant, user: string, history: StoredItem[], record: ResponseRecord, stream: boolean, res: Response, replayRunId?: string): Promise<ResponseObject | Readable> {
    let final: ResponseObject;
    let events: StoredEvent[];
    if (replayRunId) {
      // A repeat (same Idempotency-Key): the first answer again.
      final = await this.firstAnswer(tenant, replayRunId);
      events = eventsOf(final);
    } else {
      const now = this.clock.now();
      const runId = randomId("run_", 24);
      let usage: TokenUsage;
      ({ events, usage } = await this.turn(history, record));
      const head: ResponseHead = { id: responseIdOf(runId), suffix: suffixOf(runId), created_at: Math.floor(now.getTime() / 1000), model: ECHO_MODEL, settings: record.settings };
      const assembler = new ResponseAssembler(head, () => {}, () => head.created_at);
      for (const e of events) assembler.event(e);
      final = assembler.final!;
      const endUserId = await ensureEndUser(this.db, tenant, user);
      await this.records.add({
        id: runId,
        app_id: tenant.appId,
        environment: tenant.environment,
        end_user_id: endUserId,
        output: textOf(final),
        input_tokens: usage.inputTokens,
        output_tokens: usage.outputTokens,
        created_at: now.toISOString(),
        period: periodOf(now),
        source: "responses",
        request: { prompt: "", model: ECHO_MODEL, responses: { ...record, final } },
      });
      this.recorded();
    }
    res.setHeader("Service-Run-Id", `run_${final.id.slice(5)}`);
    if (!stream) return final;
    const out = new EventStreamWriter(res);
    const head: ResponseHead = { id: final.id, suffix: final.id.slice(5), created_at: final.created_at, model: ECHO_MODEL, settings: record.settings };
    const assembler = new ResponseAssembler(head, (e) => out.write(frame(e)), () => final.completed_at ?? final.created_at);
    assembler.open();
    for (const e of events) assembler.event(e);
    out.write(DONE_FRAME);
    out.end();
    return out.out;
  }

  /** This request's turn of the conversation: the events a model run would have stored, and what it used. */
  private async turn(history: StoredItem[], record: ResponseRecord): Promise<{ events: StoredEvent[]; usage: TokenUsage }> {
    const lastUser = history.findLastIndex((i) => i.type === "message" && i.role === "user");
    const prompt = lastUser >= 0 ? itemText(history[lastUser]) : "";
    let steps;
    try {
      steps = parseScript(prompt, record.settings.tools.map((t) => t.name));
    } catch (err) {
      if (err instanceof ScriptError) throw new ApiError("invalid_request", err.message, { param: "input" });
      throw err;
    }
    const since = history.slice(lastUser + 1);
    const calls = since.filter((i) => i.type === "function_call");
    const lastCall = calls.at(-1);
    const results = since.filter((i) => i.type === "function_call_output" && i.call_id === lastCall?.call_id).map((i) => String(i.output));
    let text = "";
    const toolCalls: HandedBackToolCall[] = [];
    let failure: string | null = null;
    for (const step of steps ? stepsOfTurn(steps, calls.length) : [{ say: prompt }]) {
      if ("say" in step) text += step.say.replaceAll("{{result}}", results.join("\n"));
      else if ("call" in step) toolCalls.push({ id: `call_${randomId("", 24)}`, name: step.call, arguments: JSON.stringify(step.arguments) });
      else if ("fail" in step) failure = step.fail;
      else await new Promise((r) => setTimeout(r, step.wait));
      if (failure) break;
    }
    const inputText = history.map((i) => (i.type === "message" ? itemText(i) : i.type === "function_call_output" ? String(i.output) : "")).join(" ");
    const usage = echoUsage(countWords(`${record.settings.instructions ?? ""} ${inputText}`), countWords(text));
    const deltas = (text.match(/\S+\s*|\s+/g) ?? []).map((piece, i): StoredEvent => ({ seq: i + 1, kind: "text_delta", data: { kind: "text_delta", turn: 1, text: piece } }));
    return { events: [...deltas, ...ending(text, usage, failure === null ? { toolCalls } : { error: { code: "runtime_error", message: failure } })], usage };
  }

  private async firstAnswer(tenant: Tenant, runId: string): Promise<ResponseObject> {
    const [row] = await this.db.query<{ final: ResponseObject | null }>(`SELECT request->'responses'->'final' AS final FROM runs WHERE id = $1 AND app_id = $2 AND environment = $3::"Environment"`, [runId, tenant.appId, tenant.environment]);
    if (!row?.final) throw new ApiError("not_found", "The response this Idempotency-Key created is gone.");
    return row.final;
  }
}

/** What a response said: its message's text. */
const textOf = (r: ResponseObject): string => r.output.flatMap((i) => (i.type === "message" ? i.content.map((p) => p.text) : [])).join("");

/** What an echo answer used: its words as tokens, cost class `free` (the service answered), nothing charged. */
const echoUsage = (inputTokens: number, outputTokens: number): TokenUsage => ({ inputTokens, outputTokens, costClass: costClassOf("service"), amountMicros: 0 });

/**
 * How an echo answer ends, as a model run's turn ends: its `usage` event, then `run_completed`
 * (with the tool calls handed back) or `run_failed` (a script's `fail` step: `runtime_error`).
 */
function ending(text: string, usage: TokenUsage, end: { toolCalls: HandedBackToolCall[] } | { error: { code: string; message: string } }): StoredEvent[] {
  const used: StoredEvent = { seq: 0, kind: "usage", data: { kind: "usage", turn: 1, usage } };
  if ("error" in end) return [used, { seq: 0, kind: "run_failed", data: { kind: "run_failed", error: end.error, stopReason: "runtime_error" } }];
  const { toolCalls } = end;
  return [used, { seq: 0, kind: "run_completed", data: { kind: "run_completed", output: text, usage, stopReason: toolCalls.length ? "tool_calls" : "stop", toolCalls } }];
}

/** The events that give `final` again (a repeat's stream). */
function eventsOf(final: ResponseObject): StoredEvent[] {
  const text = textOf(final);
  const toolCalls = final.output.flatMap((i) => (i.type === "function_call" ? [{ id: i.call_id, name: i.name, arguments: i.arguments }] : []));
  const usage = echoUsage(final.usage?.input_tokens ?? 0, final.usage?.output_tokens ?? 0);
  const deltas: StoredEvent[] = text ? [{ seq: 1, kind: "text_delta", data: { kind: "text_delta", turn: 1, text } }] : [];
  const error = final.status === "failed" ? { code: final.error?.code ?? "runtime_error", message: (final.error?.message ?? "").replace(/^The user's runtime failed: /, "") } : null;
  return [...deltas, ...ending(text, usage, error ? { error } : { toolCalls })];
}
