import type { ChatMessage, ChatToolCall, JobEvent, Tool } from "@svc/contract";
import { randomId } from "../crypto.js";
import { periodOf } from "../ledger/metering.js";
import { judge, type Limit, type Verdict } from "./limits.js";
import { RunDriver, type RunEnd } from "./driver.js";
import { Abandoned, Cancelled, RunStop } from "./run-stop.js";
import type { NewApproval, NewToolCall, RunInputs } from "./run-rows.js";

export const DEFAULT_MAX_TURNS = 20;
export const DEFAULT_ANSWER_TIMEOUT_MS = 10 * 60 * 1000;
/**
 * How many times one turn may be cut off and run again (its machine's link lost,
 * its driving instance lost) before the run stops: a machine that keeps dropping
 * off mid-turn cannot make the service re-run and re-store a turn without end.
 */
export const MAX_TURN_RESTARTS = 5;

interface TurnResult {
  text: string;
  calls: { name: string; arguments: string }[];
  usage: { inputTokens: number; outputTokens: number };
  finishReason: string;
}

/**
 * The agent loop on a model runtime, owned by the service: a model turn on the
 * user's machine; the model's tool calls out to the app (after its approval when
 * the tool asks for one); their results back into the conversation; the next
 * turn; until the model answers or a limit stops it. The conversation is saved at
 * each turn's end, so another instance can take the run over where it stands.
 */
export class ModelRunDriver extends RunDriver {
  private turnText = "";
  /** Can a limit pause this run (see `holdAtLimits`)? Assumed until the start or the first look says otherwise. */
  private limitable = this.run.request.unlimited !== true;
  private readonly tools: Tool[] = this.run.request.tools ?? [];
  private readonly limits = {
    maxTurns: this.run.request.limits?.maxTurns ?? DEFAULT_MAX_TURNS,
    toolMs: this.run.request.limits?.toolResultTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS,
    approvalMs: this.run.request.limits?.approvalTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS,
  };

  protected override partialOutput(): string {
    return this.turnText;
  }

  protected async loop(): Promise<RunEnd> {
    const { request } = this.run;
    // A follow-up: the conversation it continues goes first (its system prompt is this run's).
    const opening: ChatMessage[] = [...(request.system ? [{ role: "system" as const, content: request.system }] : []), ...(request.history ?? []), { role: "user", content: request.prompt }];
    let transcript: ChatMessage[] = this.run.transcript ?? opening;
    // How many of its messages are stored (a run taken over: all it read); each write adds those after them.
    let stored = this.run.transcript?.length ?? 0;
    const added = () => {
      const from = stored;
      stored = transcript.length;
      return { from, messages: transcript.slice(from) };
    };
    let turns = this.run.turns;
    const last = transcript.at(-1);
    if (last?.role === "assistant" && last.tool_calls?.length) {
      // `running` here: its answers were all in and the next turn had begun (its
      // results join the transcript only at that turn's end; `running` is stored
      // with the turn's first write, or as its machine's link was lost), so it runs again.
      const nextTurnBegun = this.run.status === "running";
      transcript = await this.awaitAnswers(transcript);
      if (nextTurnBegun) await this.restart(turns + 1);
    } else if (this.seq > 1) {
      // Taken over mid-turn: that turn runs again; readers drop its text so far.
      await this.restart(turns + 1);
    }
    for (;;) {
      // Right after the answers were read the inputs are known: no second read before the turn.
      let inputs = await this.inputs();
      if (turns >= this.limits.maxTurns) throw new RunStop("max_turns", `The run reached its limit of ${this.limits.maxTurns} model turns.`);
      // Between turns (the start checked the plan before the first): a limit reached pauses the run until it no longer holds.
      if (turns > 0) {
        await this.holdAtLimits();
        inputs = await this.inputs();
      }
      // Messages the user added while the run worked go in before this model call, after the turn they came during.
      const steer = this.takeMessages(inputs, "next_turn");
      if (steer.taken.length) {
        transcript = [...transcript, ...steer.taken.map((m): ChatMessage => ({ role: "user", content: m.content }))];
        await this.flush({ transcript: added() }, { delivered: steer.delivered });
      }
      const turn = turns + 1;
      const r = await this.modelTurn(turn, transcript);
      turns = turn;
      const calls: ChatToolCall[] = r.calls.map((c) => ({ id: randomId("call_", 20), type: "function", function: { name: c.name, arguments: c.arguments } }));
      transcript = [...transcript, { role: "assistant", content: r.text || null, ...(calls.length ? { tool_calls: calls } : {}) }];
      const { row } = this.usage(turn, r.usage.inputTokens, r.usage.outputTokens);
      // Written in order, and a write that fails ends this driver: the next one adds from where this one ends.
      const patch = { turns, transcript: added(), output: r.text, addInputTokens: r.usage.inputTokens, addOutputTokens: r.usage.outputTokens };
      if (calls.length === 0) {
        // A message came while the model answered: the run goes on with it instead of ending.
        if ((await this.inputs()).messages?.length) {
          await this.flush(patch, { usage: [row] });
          continue;
        }
        return { output: r.text, stopReason: r.finishReason === "stop" ? "end_turn" : r.finishReason, patch, extra: { usage: [row] } };
      }
      const { toolCalls, approvals } = this.announce(calls);
      await this.flush({ ...patch, status: "waiting" }, { usage: [row], toolCalls, approvals });
      transcript = await this.awaitAnswers(transcript);
    }
  }

  /** Announces that turn `turn` runs again, unless it was cut off too often already. */
  private async restart(turn: number): Promise<void> {
    const before = await this.throughOutage(() => this.deps.store.restarts(this.run.id, turn));
    if (before >= MAX_TURN_RESTARTS) {
      throw new RunStop("worker_lost", `Turn ${turn} was cut off ${before + 1} times (the user's machine or the instance driving the run kept dropping); it is not run again.`);
    }
    this.emit("turn_restarted", { turn, reason: "the run's machine or its driving instance was lost mid-turn; the turn runs again" });
  }

  /**
   * Between turns: the plan's spend ceiling, a tokens plan that stops at its allowance, the run's
   * own budget. One reached pauses the run (`run_paused`, status `paused`, no job held on the
   * machine) until it no longer holds: an upgrade, the next window, a raised budget (each wakes
   * the driver; a look every poll interval and at the window's end catches the rest). Still paused
   * past `RUN_PAUSE_MAX_SECONDS` it fails `pause_expired`; a cancel ends it meanwhile. A run that
   * nothing can pause (no ceiling, no stopping allowance, no budget) is looked at once, then only
   * when a budget is set on it.
   */
  private async holdAtLimits(): Promise<void> {
    // Taken over while paused: the pause and its event stand; this driver waits on (or resumes it at once).
    const takenOverPaused = this.run.status === "paused";
    if (!this.limitable && !this.budgetSet() && !takenOverPaused) return;
    let verdict = await this.lookAtLimits();
    this.limitable = verdict.limitable;
    if (!verdict.holds && !takenOverPaused) return;
    const pause = takenOverPaused ? await this.pauseTakenOver(verdict) : await this.pause(verdict);
    const expiresAt = pause.pausedAt.getTime() + this.deps.limits.pauseMaxMs;
    while (verdict.holds) {
      const now = this.deps.clock.now().getTime();
      const until = Math.min(expiresAt, Date.parse(verdict.allowance.resetsAt));
      await this.waitWake(Math.max(0, Math.min(this.deps.pollMs, until - now)));
      await this.inputs();
      verdict = await this.lookAtLimits();
      if (verdict.holds && this.deps.clock.now().getTime() >= expiresAt) {
        throw new RunStop("pause_expired", `The run stayed paused (${verdict.holds.limit}) for ${Math.round(this.deps.limits.pauseMaxMs / 1000)} s (RUN_PAUSE_MAX_SECONDS) and the limit still holds: ${verdict.holds.message}`);
      }
    }
    const reason = pause.limit === "run_budget" ? "budget_raised" : verdict.allowance.period !== pause.window ? "new_period" : "plan_changed";
    const pausedMs = Math.max(0, this.deps.clock.now().getTime() - pause.pausedAt.getTime());
    this.emit("run_resumed", { limit: pause.limit, reason, pausedMs });
    this.run = { ...this.run, status: "running", paused_at: null };
    await this.flush({ status: "running" });
    void this.deps.facts?.runResumed(this.run, { limit: pause.limit, reason, pausedMs }, pause.pausedAt.toISOString());
  }

  /** Pauses the run at the limit that holds: its event, its status, its webhook. */
  private async pause(verdict: Verdict): Promise<Pause> {
    const { limit, message } = verdict.holds!;
    const pausedAt = this.deps.clock.now();
    const paused = { limit, message, allowance: verdict.allowance, budget: verdict.budget, pausedAt: pausedAt.toISOString(), expiresAt: new Date(pausedAt.getTime() + this.deps.limits.pauseMaxMs).toISOString() };
    const data = { ...paused, resume: RESUME[limit] };
    this.emit("run_paused", data);
    await this.flush({ status: "paused", pause: { kind: "run_paused", ...data } });
    this.run = { ...this.run, status: "paused", paused_at: pausedAt };
    void this.deps.facts?.runPaused(this.run, paused);
    return { limit, window: verdict.allowance.period, pausedAt };
  }

  /** The pause a run taken over was in, as its last `run_paused` said it. */
  private async pauseTakenOver(verdict: Verdict): Promise<Pause> {
    const last = await this.throughOutage(() => this.deps.store.lastPause(this.run.id));
    return {
      limit: last?.limit ?? verdict.holds?.limit ?? "run_budget",
      window: last?.period ?? verdict.allowance.period,
      pausedAt: this.run.paused_at ? new Date(this.run.paused_at) : this.deps.clock.now(),
    };
  }

  private async lookAtLimits(): Promise<Verdict> {
    const read = await this.throughOutage(() => this.deps.store.limits(this.run.id, periodOf(this.deps.clock.now())));
    if (!read) throw new RunStop("internal_error", `Run ${this.run.id} is gone.`);
    return judge(read);
  }

  /** One model turn on the user's runtime; text streams out as it comes, a cancel stops it. */
  private async modelTurn(turn: number, messages: ChatMessage[]): Promise<TurnResult> {
    this.turnText = "";
    const calls: TurnResult["calls"] = [];
    const chat = this.trace.turn(turn, messages);
    const result = new Promise<TurnResult>((resolve, reject) => {
      this.dispatch(
        {
          kind: "model_turn",
          runtime: this.run.runtime_name!,
          model: this.run.model,
          messages,
          ...(this.tools.length ? { tools: this.tools.map((t) => ({ type: "function" as const, function: { name: t.name, description: t.description, parameters: t.parameters } })) } : {}),
        },
        (e: JobEvent) => {
          if (e.type === "text_delta") {
            this.turnText += e.text;
            this.emitText(turn, e.text);
          } else if (e.type === "tool_call") calls.push({ name: e.name, arguments: e.arguments });
          else if (e.type === "done") {
            const text = this.turnText || e.output;
            chat.end({ usage: e.usage, finishReason: e.finishReason, output: text, toolCalls: calls });
            resolve({ text, calls, usage: e.usage, finishReason: e.finishReason });
          } else if (e.type === "failed") {
            const lost = e.code === "worker_lost" && !this.stoppedHere();
            const stop = lost ? null : this.failure(e);
            chat.end({ error: stop ? { code: stop.code, message: stop.message } : { code: e.code, message: e.message } });
            reject(stop ?? this.workerLost());
          }
        },
        chat,
      );
    });
    result.catch(() => {});
    let finished = false;
    // While the turn runs, a cancel (or a lost lease) is looked for at each wake.
    const watch = (async () => {
      while (!finished) {
        await this.waitWake(this.deps.pollMs);
        if (!finished) await this.inputs();
      }
    })();
    try {
      return await Promise.race([result, watch.then(() => result)]);
    } catch (err) {
      // Cancelled, or the lease lost: the worker stops the turn.
      this.job?.cancel(err instanceof Cancelled ? "the run was cancelled" : "the run stopped");
      throw err;
    } finally {
      finished = true;
      chat.end({});
      this.nudge();
      this.job = null;
    }
  }

  /**
   * The machine's link was lost mid-turn: the run waits for it. Whichever instance
   * it reconnects to within the grace takes the run over and runs this turn again
   * (`turn_restarted`); past the grace it fails `worker_lost`.
   */
  private workerLost(): Error {
    this.releaseLease();
    return new Abandoned();
  }

  /** The rows and events of a turn's calls: a tool call, or first an approval request for tools that ask for one. */
  private announce(calls: ChatToolCall[]): { toolCalls: NewToolCall[]; approvals: NewApproval[] } {
    const toolCalls: NewToolCall[] = [];
    const approvals: NewApproval[] = [];
    const now = this.deps.clock.now().getTime();
    for (const call of calls) {
      const spec = this.tools.find((t) => t.name === call.function.name);
      if (!spec) continue; // answered to the model as an unknown tool, without asking the app
      const args = parseArguments(call.function.arguments);
      if (spec.needsApproval) {
        const deadlineAt = new Date(now + this.limits.approvalMs).toISOString();
        const approvalId = approvalIdOf(call.id);
        this.trace.approval(approvalId, "tool", spec.name, call.id);
        approvals.push({ approval_id: approvalId, kind: "tool", request: { callId: call.id, tool: spec.name, arguments: args }, deadline_at: deadlineAt });
        this.emit("approval_request", { approvalId, what: "tool", tool: spec.name, callId: call.id, arguments: args, ...(spec.description ? { description: spec.description } : {}), deadlineAt });
      } else {
        toolCalls.push(this.toolCall(call, args, now));
      }
    }
    return { toolCalls, approvals };
  }

  private toolCall(call: ChatToolCall, args: unknown, now: number): NewToolCall {
    const deadlineAt = new Date(now + this.limits.toolMs).toISOString();
    this.trace.toolCall(call.id, call.function.name, args);
    this.emit("tool_call", { callId: call.id, name: call.function.name, arguments: args, deadlineAt });
    return { call_id: call.id, name: call.function.name, arguments: args, deadline_at: deadlineAt };
  }

  /** Waits until every call of the last turn is answered (or denied), then adds the results to the conversation. */
  private async awaitAnswers(transcript: ChatMessage[]): Promise<ChatMessage[]> {
    const last = transcript.at(-1);
    const calls = last?.role === "assistant" ? (last.tool_calls ?? []) : [];
    for (;;) {
      const inputs = await this.inputs();
      const now = this.deps.clock.now().getTime();
      const { results, granted, nextDeadline } = this.collect(calls, inputs, now);
      if (granted.length) {
        await this.flush({ status: "waiting" }, { toolCalls: granted });
        continue;
      }
      if (results) {
        // The next turn starts at once; `running` is stored with its first write (its first text, or its end).
        this.later({ status: "running" });
        return [...transcript, ...results];
      }
      await this.waitWake(Math.min(this.deps.pollMs, nextDeadline - now));
    }
  }

  /** Where the answers stand: all results (or null while some are open), calls granted since, and the nearest deadline. */
  private collect(calls: ChatToolCall[], inputs: RunInputs, now: number) {
    const results: ChatMessage[] = [];
    const granted: NewToolCall[] = [];
    let open = false;
    let nextDeadline = Infinity;
    // The reason is made only when the deadline has passed (an Error captures a stack).
    const waitOn = (deadlineAt: string, stop: () => RunStop) => {
      const at = Date.parse(deadlineAt);
      if (at <= now) throw stop();
      nextDeadline = Math.min(nextDeadline, at);
      open = true;
    };
    for (const call of calls) {
      const name = call.function.name;
      const spec = this.tools.find((t) => t.name === name);
      if (!spec) {
        results.push(toolMessage(call.id, `Error: there is no tool named ${name}.`));
        continue;
      }
      if (spec.needsApproval) {
        const a = inputs.approvals.get(approvalIdOf(call.id));
        if (!a) throw new RunStop("internal_error", `The approval of call ${call.id} is missing.`);
        if (!a.answered) {
          waitOn(a.deadline_at, () => new RunStop("approval_timeout", `No decision on approval ${a.approval_id} (${name}) in time.`));
          continue;
        }
        this.trace.approvalDone(a.approval_id, a.decision ?? "deny");
        if (a.decision !== "allow") {
          results.push(toolMessage(call.id, `Error: the user denied this call${a.reason ? `: ${a.reason}` : "."}`));
          continue;
        }
      }
      const tc = inputs.toolCalls.get(call.id);
      if (!tc) {
        granted.push(this.toolCall(call, parseArguments(call.function.arguments), now));
        open = true;
        continue;
      }
      if (!tc.answered) {
        waitOn(tc.deadline_at, () => new RunStop("tool_result_timeout", `No result for tool call ${call.id} (${name}) in time.`));
        continue;
      }
      this.trace.toolDone(call.id, tc.result, tc.is_error === true);
      const text = typeof tc.result === "string" ? tc.result : JSON.stringify(tc.result);
      results.push(toolMessage(call.id, tc.is_error ? `Error: ${text}` : text));
    }
    return { results: open ? null : results, granted, nextDeadline };
  }
}

/** A pause: the limit it is at, the plan window it began in, since when. */
interface Pause {
  limit: Limit;
  window: string;
  pausedAt: Date;
}

/** What resumes a run paused at each limit. */
const RESUME: Record<Limit, string> = {
  spend_ceiling: "An upgrade to a plan with a higher ceiling (the checkout component, or PUT /v1/users/:id/plan), or the next window (allowance.resetsAt).",
  allowance: "An upgrade to a larger plan (the checkout component, or PUT /v1/users/:id/plan), or the next window (allowance.resetsAt).",
  run_budget: "POST /v1/runs/:id/budget with a higher maxMicros or maxTokens.",
};

const approvalIdOf = (callId: string) => `apr_${callId.replace(/^call_/, "")}`;
const toolMessage = (id: string, content: string): ChatMessage => ({ role: "tool", tool_call_id: id, content });

/** The model's arguments as JSON when they are JSON, else the text as written. */
export function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text || "{}");
  } catch {
    return text;
  }
}
