import type { AgentRunJob, JobEvent, Tool } from "@svc/contract";
import { SessionsUnsupported } from "../workers/hub.js";
import { contextPrompt, newSession } from "./conversations.js";
import { randomId } from "../crypto.js";
import { RunDriver, type RunEnd } from "./driver.js";
import { Abandoned, RunStop } from "./run-stop.js";
import { DEFAULT_ANSWER_TIMEOUT_MS, parseArguments } from "./model-loop.js";
import type { AgentState, NewApproval, NewToolCall, NewUsageRow, RunInputs, RunPatch } from "./run-rows.js";

/** The link to the machine dropped while its worker keeps the job: the run waits for it (on whichever instance it reconnects to). */
class LinkLost extends Error {}

/** The CLI session a follow-up resumes is not on the machine (forgotten, expired, never kept, or a worker that keeps none). */
class SessionLost extends Error {}

/** Tokens as a job event says them. */
type Usage = Extract<JobEvent, { type: "done" }>["usage"];
type Tokens = Required<Usage>;
const KINDS = ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"] as const;
/**
 * Model calls a run keeps open (reported partially, not yet over) at most: a CLI has a
 * few at once (subagents in parallel); a machine reporting more has the rest counted
 * only by their final report or the job's total, so what the run's end writes stays small.
 */
const MAX_OPEN_CALLS = 64;
/** Answers to the CLI kept to be sent again after a resume (see `AgentState.relayed`). */
const RELAYED_KEPT = 16;
type Relayed = NonNullable<AgentState["relayed"]>[number];
const tokens = (u: Usage): Tokens => ({ inputTokens: u.inputTokens, outputTokens: u.outputTokens, cacheReadTokens: u.cacheReadTokens ?? 0, cacheWriteTokens: u.cacheWriteTokens ?? 0 });

/** A call of one of the app's tools that the agent CLI made through the worker's tool bridge, until it is answered. */
interface OpenToolCall {
  /** The bridge's id: what the worker is answered under. */
  workerId: string;
  /** The service's id, the one the app sees. */
  callId: string;
  spec: Tool;
  args: unknown;
  /** Set while it waits for the app's approval (a tool marked `needsApproval`). */
  approvalId?: string;
  deadline: number;
}

/**
 * A run on an agent runtime (a coding-agent CLI on the user's machine): the CLI
 * runs its own loop in the user's working folder; the service relays what it
 * says and does, turns each of its permission requests into an approval request
 * answered by the app, and each call of one of the app's tools (offered to the
 * CLI through the worker's MCP bridge) into the same `tool_call` (after the same
 * `approval_request` for tools that need one) as on a model run, whose result
 * goes back to the CLI. Its loop lives in the CLI process on the user's machine:
 * a worker that resumes jobs (`job_resume`) keeps the CLI running through a lost
 * link, its events numbered, and each write of the run stores where it stands in
 * the job (`AgentState`: the last job event stored, the permissions and calls it
 * waits on). When the link drops, the run is given up here and waits for the
 * machine; whichever instance it reconnects to within the grace takes the run over
 * and resumes the job from the last event stored (`resume_job`): every event once,
 * nothing asked twice. A worker that does not resume jobs, or one restarted meanwhile
 * (`job_not_held`), ends the run with a clear reason.
 *
 * Every token the CLI's model used is counted once, however the run ends: each
 * model call the worker reports (`usage` job events) is a ledger row (`tokens:<run>:<n>`,
 * n = 1, 2, ... in the order counted) and a `usage` event of turn n, written when the
 * call is over; a call still open when the run ends (failed, cancelled, past a deadline,
 * its link lost) is written then, as far as the API said (its partial report). The job's
 * own total at its end (`done`'s usage, or `failed`'s when it has one) adds one more row
 * for what it has beyond the rows written (all of it from a worker that reports no calls).
 */
export class AgentRunDriver extends RunDriver {
  private text = "";
  /** Model calls reported partially (still open): call → its usage as last said. */
  private readonly open = new Map<string, Usage>();
  /** Model calls whose row is written (or given to a write): a report of one again is ignored. */
  private readonly counted = new Set<string>();
  /** The tokens of the rows written, and how many rows (the next row's number is one more). */
  private readonly written: Tokens = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 };
  private rows = 0;
  /** Open permission requests: approval id → the CLI's request id, and the deadline. */
  private readonly asked = new Map<string, { requestId: string; deadline: number }>();
  /** Open calls of the app's tools, by the service's call id. */
  private readonly calls = new Map<string, OpenToolCall>();
  private readonly tools: Tool[] = this.run.request.tools ?? [];
  private readonly limits = {
    toolMs: this.run.request.limits?.toolResultTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS,
    approvalMs: this.run.request.limits?.approvalTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS,
  };

  /** The job on the machine once sent (a resumable one: its events are numbered), and the last of its events handled here. */
  private jobId: string | null = null;
  private jobN = 0;
  private resumable = false;
  /** The answers passed on lately, and those to send again once the run is taken over. */
  private relayed: Relayed[] = [];
  private resend: Relayed[] = [];

  protected override partialOutput(): string {
    return this.text;
  }

  protected override checkpoint(): RunPatch | null {
    if (!this.resumable || !this.jobId) return null;
    const state: AgentState = {
      // Queued on the machine's connection, never sent: nothing to resume, a takeover sends it afresh.
      jobId: this.jobSent ? this.jobId : "",
      n: this.jobN,
      ...(this.jobSent ? { sentAt: this.jobSentAt } : {}),
      asked: Object.fromEntries(this.asked),
      calls: Object.fromEntries([...this.calls].map(([id, c]) => [id, { workerId: c.workerId, name: c.spec.name, args: c.args, ...(c.approvalId ? { approvalId: c.approvalId } : {}), deadline: c.deadline }])),
      ...(this.open.size ? { open: Object.fromEntries(this.open) } : {}),
      ...(this.relayed.length ? { relayed: this.relayed } : {}),
      rows: this.rows,
      written: { ...this.written },
    };
    return { agentState: state };
  }

  protected override checkpointStored(place: RunPatch): void {
    if (place.agentState) this.job?.ack(place.agentState.n);
  }

  /**
   * Ended without being driven here (its machine never came back within the grace, it was
   * cancelled meanwhile): the model calls its last write left open are counted first, as far
   * as the API said.
   */
  override fail(stop: Parameters<RunDriver["fail"]>[0]): Promise<void> {
    const state = this.run.agent_state;
    if (state?.open) {
      this.restoreCounts(state);
      this.store(this.uncounted());
    }
    return super.fail(stop);
  }

  /** What the run counted so far, as its last write stored it. */
  private restoreCounts(state: AgentState): void {
    for (const [call, usage] of Object.entries(state.open ?? {})) this.open.set(call, usage);
    this.rows = state.rows;
    Object.assign(this.written, state.written);
  }

  /** A run taken over after a lost link: what it stood on, as its last write stored it. */
  private async restore(state: AgentState): Promise<void> {
    this.text = await this.deps.store.streamedText(this.run.id);
    this.restoreCounts(state);
    this.jobId = state.jobId;
    this.jobN = state.n;
    // An answer sent just before the link died may never have reached the CLI: sent again (the worker ignores one it took).
    this.relayed = state.relayed ?? [];
    this.resend = [...this.relayed];
    for (const [approvalId, a] of Object.entries(state.asked)) this.asked.set(approvalId, a);
    for (const [callId, c] of Object.entries(state.calls)) {
      const spec = this.tools.find((t) => t.name === c.name);
      if (spec) this.calls.set(callId, { workerId: c.workerId, callId, spec, args: c.args, ...(c.approvalId ? { approvalId: c.approvalId } : {}), deadline: c.deadline });
    }
  }

  protected async loop(): Promise<RunEnd> {
    const state = this.run.agent_state;
    // Taken over with no place stored: its worker does not resume jobs (or the run never reached its machine's job).
    if (this.seq > 1 && !state) throw new RunStop("worker_lost", "The link to the user's machine (or the instance driving this agent run) was lost, and the machine's worker cannot resume an agent CLI's run; the run ends.");
    if (state) await this.restore(state);
    const { request } = this.run;
    const job = (): AgentRunJob => ({
      kind: "agent_run",
      runtime: this.run.runtime_name!,
      // A session beginning afresh on a follow-up gets the conversation so far as context; a resumed one has it.
      prompt: request.history?.length && !request.session?.resume ? contextPrompt(request.history, request.prompt) : request.prompt,
      ...(request.system ? { system: request.system } : {}),
      ...(this.run.model !== "auto" && this.run.model !== this.run.runtime_name ? { model: this.run.model } : {}),
      ...(this.tools.length ? { tools: this.tools.map((t) => ({ name: t.name, ...(t.description ? { description: t.description } : {}), ...(t.parameters ? { parameters: t.parameters } : {}) })) } : {}),
      ...(request.session ? { session: request.session } : {}),
    });
    // A machine whose worker keeps no sessions refuses a resume at the dispatch (SessionsUnsupported): a lost session, as the worker's `session_not_found`.
    const send = (spec: AgentRunJob, resume?: { jobId: string; after: number; sentAt?: number }) => new Promise<Extract<JobEvent, { type: "done" }>>((resolve, reject) => {
      const handle = this.dispatch(
        spec,
        (e, n) => {
          if (n !== undefined) {
            // Sent again after a resume, already stored: never handled twice.
            if (n <= this.jobN) return;
            this.jobN = n;
          }
          switch (e.type) {
            case "text_delta":
              this.text += e.text;
              return this.emitText(1, e.text);
            case "activity":
              this.emit("activity", { summary: e.summary, ...(e.detail !== undefined ? { detail: e.detail } : {}) });
              return this.flushSoon();
            case "permission_request":
              return this.askPermission(e);
            case "permission_withdrawn":
              return this.withdraw(e.requestId);
            case "session_resumed":
              return this.sessionResumed(e.reason);
            case "tool_call":
              return this.toolCall(e);
            case "usage":
              return this.callUsage(e);
            case "done":
              return resolve(e);
            case "failed":
              if (e.code === "worker_lost" && !this.stoppedHere()) {
                // The worker keeps the CLI running through the cut: the run waits for the machine, its open calls still open.
                if (this.resumable) return reject(new LinkLost());
                this.store(this.uncounted(e.usage));
                // An older worker stops the CLI when its link drops, so nothing runs unattended; there is nothing to wait for.
                return reject(new RunStop("worker_lost", "The link to the user's machine was lost while its agent CLI ran, and the machine's worker cannot resume an agent CLI's run; the run ends."));
              }
              // What the machine counted before the end goes in before the end is written.
              this.store(this.uncounted(e.usage));
              if (e.code === "session_not_found") return reject(new SessionLost(e.message));
              if (e.code === "job_not_held") return reject(new RunStop("worker_restarted", `The worker on the user's machine no longer holds this run's agent CLI (${e.message}); the run cannot go on.`));
              return reject(this.failure(e));
          }
        },
        this.trace.agentJob(),
        resume,
      );
      this.jobId = handle.jobId;
      this.resumable = handle.resumable;
    }).catch((err: unknown) => Promise.reject(err instanceof SessionsUnsupported ? new SessionLost(err.message) : err));
    let result = send(job(), state?.jobId ? { jobId: state.jobId, after: state.n, ...(state.sentAt ? { sentAt: state.sentAt } : {}) } : undefined);
    result.catch(() => {});
    let finished = false;
    // Taken over: what was answered while the machine was away is passed on at once.
    let look = state !== null;
    if (state?.jobId) {
      this.emit("activity", { summary: `the user's machine is back; its agent CLI goes on from event ${state.n} of its job`, detail: { resumed: true, after: state.n } });
      this.flushSoon();
    }
    // While the CLI works: decisions and results are passed on as they come, deadlines kept, a cancel stops it.
    const relay = (async () => {
      while (!finished) {
        const now = this.deps.clock.now().getTime();
        const deadlines = [...[...this.asked.values()].map((a) => a.deadline), ...[...this.calls.values()].map((c) => c.deadline)];
        if (!look) await this.waitWake(Math.min(...deadlines, now + this.deps.pollMs) - now);
        look = false;
        if (finished) return;
        const inputs = await this.inputs();
        for (const r of this.resend.splice(0)) this.answerAgain(r, inputs);
        // What the user added while the CLI works goes to it mid-turn, as typed into it (once the job is on the machine).
        if (this.jobSent && this.job?.steerable && inputs.messages?.length) {
          const steer = this.takeMessages(inputs, "now");
          for (const m of steer.taken) this.job.sendMessage(m.message_id, m.content);
          await this.flush(undefined, { delivered: steer.delivered });
        }
        const waitedOn = this.asked.size + this.calls.size;
        this.relayPermissions(inputs);
        const granted = this.relayToolCalls(inputs);
        if (granted.length) await this.flush({ status: "waiting" }, { toolCalls: granted });
        else if (waitedOn > 0 && this.asked.size + this.calls.size === 0) await this.flush({ status: "running" });
      }
    })();
    try {
      for (;;) {
        try {
          const done = await Promise.race([result, relay.then(() => result)]);
          const output = done.output || this.text;
          const rows = this.uncounted(done.usage);
          return {
            output,
            stopReason: done.finishReason,
            patch: { turns: 1, ...this.added(rows) },
            extra: { usage: rows },
          };
        } catch (err) {
          if (!(err instanceof SessionLost)) throw err;
          // The previous run's session is not on the machine: refused as asked, or begun afresh with the transcript as context.
          if (request.onSessionLost !== "restart" || !request.previousRunId || !request.session?.resume) throw new RunStop("session_not_found", `${err.message} The follow-up was not started afresh (onSessionLost: refuse); start it with onSessionLost: "restart" to begin a fresh session with the stored transcript as context.`);
          request.history = await this.throughOutage(() => this.deps.store.history(request.previousRunId!));
          request.session = newSession();
          await this.throughOutage(() => this.deps.store.setSession(this.run.id, request.session!), true);
          this.emit("session_restarted", { previousRunId: request.previousRunId, reason: err.message });
          await this.flush();
          result = send(job());
          result.catch(() => {});
        }
      }
    } catch (err) {
      if (err instanceof LinkLost) {
        // Where the run stands is stored with everything it said, then the run waits for its machine, anywhere.
        await this.flush().catch(() => {});
        this.releaseLease();
        throw new Abandoned();
      }
      // Failed, cancelled, past a deadline, its link lost: the calls still open are counted as far as the API said, before the end is written.
      this.store(this.uncounted());
      throw err;
    } finally {
      finished = true;
      this.nudge();
    }
  }

  /** A model call's usage, as the worker reports it: a partial report is kept until the call is over (or the run ends); a final one is written at once. */
  private callUsage(e: Extract<JobEvent, { type: "usage" }>): void {
    if (this.counted.has(e.call)) return;
    this.trace.modelCall(e.call, e.usage, e.partial === true);
    if (e.partial) {
      if (this.open.has(e.call) || this.open.size < MAX_OPEN_CALLS) this.open.set(e.call, e.usage);
      return;
    }
    this.open.delete(e.call);
    this.counted.add(e.call);
    this.store([this.count(e.usage)]);
  }

  /**
   * The rows not written yet: one for each call still open (its partial usage), and
   * one for what `total` (the job's own, at its end) has beyond every row, kind by kind.
   */
  private uncounted(total?: Usage): NewUsageRow[] {
    const rows: NewUsageRow[] = [];
    for (const [call, usage] of this.open) {
      this.counted.add(call);
      rows.push(this.count(usage));
    }
    this.open.clear();
    if (total) {
      const all = tokens(total);
      const beyond = Object.fromEntries(KINDS.map((k) => [k, Math.max(0, all[k] - this.written[k])])) as Tokens;
      if (KINDS.some((k) => beyond[k] > 0)) rows.push(this.count(beyond));
    }
    return rows;
  }

  /** One ledger row (and its `usage` event) for `usage`: the next row of the run. */
  private count(usage: Usage): NewUsageRow {
    const t = tokens(usage);
    for (const k of KINDS) this.written[k] += t[k];
    return this.usage(++this.rows, t.inputTokens, t.outputTokens, t).row;
  }

  /** The run's token totals added by `rows` (cache tokens are apart, in the rows only). */
  private added(rows: NewUsageRow[]): { addInputTokens: number; addOutputTokens: number } {
    return { addInputTokens: rows.reduce((n, r) => n + r.input_tokens, 0), addOutputTokens: rows.reduce((n, r) => n + r.output_tokens, 0) };
  }

  /** Writes rows counted mid-run (with their events), in order before anything written after. */
  private store(rows: NewUsageRow[]): void {
    if (rows.length) void this.flush(this.added(rows), { usage: rows }).catch(() => {});
  }

  /** The CLI asks before it acts: an approval request of kind `permission`, answered by the app. */
  private askPermission(e: Extract<JobEvent, { type: "permission_request" }>): void {
    const approvalId = randomId("apr_", 20);
    const deadline = this.deps.clock.now().getTime() + this.limits.approvalMs;
    const deadlineAt = new Date(deadline).toISOString();
    this.asked.set(approvalId, { requestId: e.requestId, deadline });
    this.trace.approval(approvalId, "permission", e.tool);
    this.emit("approval_request", { approvalId, what: "permission", tool: e.tool, arguments: e.input, ...(e.description ? { description: e.description } : {}), deadlineAt });
    const request = { requestId: e.requestId, tool: e.tool, arguments: e.input };
    void this.flush({ status: "waiting" }, { approvals: [{ approval_id: approvalId, kind: "permission", request, deadline_at: deadlineAt }] }).catch(() => {});
  }

  /** The CLI no longer needs an answer (it cancelled its request): nothing is relayed for it any more, and the app is told. */
  private withdraw(requestId: string): void {
    const entry = [...this.asked].find(([, a]) => a.requestId === requestId);
    if (!entry) return;
    this.asked.delete(entry[0]);
    this.trace.approvalDone(entry[0], "withdrawn");
    this.emit("activity", { summary: `the agent withdrew its permission request ${entry[0]}; an answer to it is no longer used`, detail: { approvalId: entry[0], withdrawn: true } });
    // Who decided is kept for the dashboard: the end user, on their machine.
    void this.deps.store.withdrawApproval(this.run.id, entry[0], this.deps.clock.now()).catch((err) => this.deps.log.warn({ err, runId: this.run.id }, "could not record a withdrawn approval"));
    void this.flush(this.asked.size + this.calls.size === 0 ? { status: "running" } : undefined).catch(() => {});
  }

  /**
   * The worker restarted and the CLI resumed its saved session: what the old CLI process
   * waited on died with it. Its permission requests are withdrawn and its calls of the app's
   * tools no longer waited for (an answer to them is not used; the CLI asks again if it still
   * needs to); the app is told.
   */
  private sessionResumed(reason: string): void {
    for (const { requestId } of [...this.asked.values()]) this.withdraw(requestId);
    const dropped = [...this.calls.keys()];
    this.calls.clear();
    this.emit("activity", { summary: `the worker on the user's machine restarted; the agent CLI goes on from its saved session${dropped.length ? ` (no longer waiting for ${dropped.join(", ")})` : ""}`, detail: { resumed: true, restarted: true, reason, droppedCalls: dropped } });
    void this.flush({ status: "running" }).catch(() => {});
  }

  /**
   * A call of one of the app's tools: a tool the run did not offer is answered as
   * an error at once, without asking the app; one marked `needsApproval` asks first;
   * the others go to the app as a `tool_call`.
   */
  private toolCall(e: Extract<JobEvent, { type: "tool_call" }>): void {
    const spec = this.tools.find((t) => t.name === e.name);
    if (!spec) return this.job?.answerTool(e.id, `There is no tool named ${e.name} on this run.`, true);
    const now = this.deps.clock.now().getTime();
    const call: OpenToolCall = { workerId: e.id, callId: randomId("call_", 20), spec, args: parseArguments(e.arguments), deadline: 0 };
    this.calls.set(call.callId, call);
    if (!spec.needsApproval) return void this.flush({ status: "waiting" }, { toolCalls: [this.announceCall(call, now)] }).catch(() => {});
    call.approvalId = `apr_${call.callId.replace(/^call_/, "")}`;
    call.deadline = now + this.limits.approvalMs;
    const deadlineAt = new Date(call.deadline).toISOString();
    this.trace.approval(call.approvalId, "tool", spec.name, call.callId);
    const approval: NewApproval = { approval_id: call.approvalId, kind: "tool", request: { callId: call.callId, tool: spec.name, arguments: call.args }, deadline_at: deadlineAt };
    this.emit("approval_request", { approvalId: call.approvalId, what: "tool", tool: spec.name, callId: call.callId, arguments: call.args, ...(spec.description ? { description: spec.description } : {}), deadlineAt });
    void this.flush({ status: "waiting" }, { approvals: [approval] }).catch(() => {});
  }

  /** The `tool_call` event and row of a call the app is to answer; its result deadline starts now. */
  private announceCall(call: OpenToolCall, now: number): NewToolCall {
    call.approvalId = undefined;
    call.deadline = now + this.limits.toolMs;
    const deadlineAt = new Date(call.deadline).toISOString();
    this.trace.toolCall(call.callId, call.spec.name, call.args);
    this.emit("tool_call", { callId: call.callId, name: call.spec.name, arguments: call.args, deadlineAt });
    return { call_id: call.callId, name: call.spec.name, arguments: call.args, deadline_at: deadlineAt };
  }

  /** Passes an answer on to the CLI, and keeps it to send again after a resume. */
  private answer(r: Relayed, inputs: RunInputs): void {
    this.relayed.push(r);
    if (this.relayed.length > RELAYED_KEPT) this.relayed.shift();
    this.answerAgain(r, inputs);
  }

  /** Sends an answer to the CLI as the run's inputs hold it (the app's decision, the tool's result). */
  private answerAgain(r: Relayed, inputs: RunInputs): void {
    if (r.kind === "tool") {
      const tc = inputs.toolCalls.get(r.id);
      if (!tc?.answered) return;
      this.job?.answerTool(r.to, typeof tc.result === "string" ? tc.result : JSON.stringify(tc.result), tc.is_error === true);
      return;
    }
    const a = inputs.approvals.get(r.id);
    if (!a?.answered) return;
    if (r.kind === "denied") this.job?.answerTool(r.to, `The user denied this call${a.reason ? `: ${a.reason}` : "."}`, true);
    else this.job?.answerPermission(r.to, a.decision === "allow", a.reason ?? (a.decision === "allow" ? undefined : "The app denied this."));
  }

  private relayPermissions(inputs: RunInputs): void {
    for (const [approvalId, open] of this.asked) {
      const a = inputs.approvals.get(approvalId);
      if (a?.answered) {
        this.asked.delete(approvalId);
        this.trace.approvalDone(approvalId, a.decision ?? "deny");
        this.answer({ kind: "permission", id: approvalId, to: open.requestId }, inputs);
      } else if (a && open.deadline <= this.deps.clock.now().getTime()) {
        throw new RunStop("approval_timeout", `No decision on approval ${approvalId} in time.`);
      }
    }
  }

  /** Approvals of tool calls decided, results in: each passed on to the CLI. Returns the calls granted since the last look. */
  private relayToolCalls(inputs: RunInputs): NewToolCall[] {
    const now = this.deps.clock.now().getTime();
    const granted: NewToolCall[] = [];
    for (const call of [...this.calls.values()]) {
      if (call.approvalId) {
        const a = inputs.approvals.get(call.approvalId);
        if (a?.answered) {
          this.trace.approvalDone(call.approvalId, a.decision ?? "deny");
          if (a.decision === "allow") granted.push(this.announceCall(call, now));
          else {
            this.calls.delete(call.callId);
            this.answer({ kind: "denied", id: call.approvalId, to: call.workerId }, inputs);
          }
        } else if (call.deadline <= now) {
          throw new RunStop("approval_timeout", `No decision on approval ${call.approvalId} (${call.spec.name}) in time.`);
        }
        continue;
      }
      const tc = inputs.toolCalls.get(call.callId);
      if (tc?.answered) {
        this.calls.delete(call.callId);
        this.trace.toolDone(call.callId, tc.result, tc.is_error === true);
        this.answer({ kind: "tool", id: call.callId, to: call.workerId }, inputs);
      } else if (call.deadline <= now) {
        throw new RunStop("tool_result_timeout", `No result for tool call ${call.callId} (${call.spec.name}) in time.`);
      }
    }
    return granted;
  }
}
