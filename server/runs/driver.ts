import { isFinalRunEvent, type ApprovalDecision, type Job, type JobEvent, type JobSpanRecord, type JobUsage, type MessageDelivery, type RunEvent, type RunEventOf, type RunStopCode } from "@svc/contract";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { JobTooLarge, SessionsUnsupported, type WorkerHub, type JobHandle } from "../workers/hub.js";
import type { RunLimitsConfig } from "../config.js";
import { costClassOf, periodOf, type CostClassValue, type CostRoute } from "../ledger/metering.js";
import type { RunBus } from "./bus.js";
import type { RunOutcome, WebhookFacts } from "../webhooks/facts.js";
import type { EchoRuntime } from "./echo-runtime.js";
import type { RunStore } from "./store.js";
import type { AnsweredApproval, NewUsageRow, RunInputs, RunPatch, RunRow, StoredEvent, Writes } from "./run-rows.js";
import { isModelTurn } from "./run-rows.js";
import { budgetView } from "./run-view.js";
import { Abandoned, Cancelled, RunStop } from "./run-stop.js";
import { isDatabaseUnavailable, type DatabaseOutage } from "../db/outage.js";
import { runTrace, type RunOutcome as TraceOutcome, type RunTrace, type TurnTrace } from "../telemetry/spans.js";
import { machineTimer } from "../http/server-timing.js";
import type { RequestTiming } from "../request-scope.js";

/** Told that a run ended, once its end is stored: its status and route kind (the metrics' `svc_runs_finished_total`). */
export type RunEnded = (status: string, routeKind: string | null) => void;

export interface DriverDeps {
  store: RunStore;
  bus: RunBus;
  hub: WorkerHub;
  /** The service's own runtime, for runs on `svc/echo` (route `service`): takes the jobs a machine would. */
  echo: EchoRuntime;
  clock: Clock;
  log: Logger;
  /** How often a waiting driver looks at the database even without a wake (a lost notification). */
  pollMs: number;
  /** Told when a run's end is written (`run.finished` webhooks). */
  facts?: WebhookFacts;
  /** What one run may take from its machine, and its deadlines (and how long it waits through a database outage). */
  limits: RunLimitsConfig;
  /** Told when a run's write meets the database unreachable: the outage is logged once. */
  outage?: DatabaseOutage;
  /** Told when a run's end is stored. */
  ended?: RunEnded;
}

/**
 * Text deltas are merged before they are stored: consecutive deltas of a turn
 * become one event until it holds this much text, and a run's deltas are written
 * at most once per window (the first after a quiet spell at once), so a machine
 * streaming 20,000 tiny deltas makes a few hundred rows, not 20,000.
 */
export const DELTA_MERGE_CHARS = 16 * 1024;
export const DELTA_WINDOW_MS = 25;
/**
 * A chat completion's deltas are relayed to its reader before they are stored (`relayFirst`), and a
 * turn cut off is run again from its start (`turn_restarted`): storing them sooner keeps nothing more
 * for anyone. They are written this long after the first one not yet written instead (1,000 chat and
 * 1,000 responses streams: a quarter of the statements, 2,387 → 571), so a completion shorter than
 * this is written once, with its end; a reader of the run's events elsewhere sees its text up to this
 * much later.
 */
export const RELAYED_DELTA_WINDOW_MS = 250;

/** A read given up while the database is away (the driver goes on with what it knew). */
class DatabaseAway extends Error {}

/** An answer this instance stored, handed to the driver with its wake. */
export type Answer =
  | { kind: "tool"; callId: string; result: unknown; isError: boolean }
  | { kind: "approval"; approvalId: string; decision: ApprovalDecision; reason: string | null }
  | { kind: "cancel"; reason: string | null }
  | { kind: "message"; messageId: string; content: string };

/** How the loop ended well: the output, why it stopped, and writes to make with the completion. */
export interface RunEnd {
  output: string;
  stopReason: string;
  patch?: RunPatch;
  extra?: Omit<Writes, "events" | "patch">;
  /** More to say in `run_completed` (a chat turn's tool calls). */
  completion?: Pick<RunEventOf<"run_completed">, "toolCalls">;
}

/**
 * What drives one run on this instance: its events (numbered, stored, then handed
 * to readers here), its waits for answers (woken by this instance's endpoints, a
 * notification, or a poll), its end. The agent loop itself is in a subclass: a
 * model runtime's turns, or an agent CLI's own loop relayed.
 */
export abstract class RunDriver {
  protected seq: number;
  protected readonly costClass: CostClassValue;
  private buffer: StoredEvent[] = [];
  /** A patch that waits for the run's next write (see `later`). */
  private deferred: RunPatch | null = null;
  private writing: Promise<void> = Promise.resolve();
  private deltaTimer: NodeJS.Timeout | null = null;
  private lastDeltaFlush = 0;
  /** What this driver took from the machine for the run (bytes, permission requests, tool calls). */
  private readonly received = { bytes: 0, permissionRequests: 0, toolCalls: 0 };
  /** Why the service stopped the current job (a limit, a deadline), handed to the loop with its `failed` event. */
  private stopped: RunStop | null = null;
  /** Ends the current job's watch (its deadline timer). */
  private endJobWatch: (() => void) | null = null;
  /**
   * The timings of the request that started this run here and may wait on it (a chat completion
   * answered whole): its jobs' time on the machine goes to that request's Server-Timing. Only the
   * numbers, not the request: the run outlives it and what fails in the run is not the request's.
   */
  waitedBy: RequestTiming | null = null;
  /** Stops the current job with the service's reason (its `failed` event follows). */
  private stopJob: ((why: RunStop) => void) | null = null;
  /** Why the service stopped the run from outside its loop (the database away too long): thrown at the loop's next look at its inputs. */
  private fault: RunStop | null = null;
  private wakeUp: (() => void) | null = null;
  /** The run's inputs as last read, kept current by this instance's own answers; `stale` when something else may have changed them. */
  private known: RunInputs | null = null;
  private stale = true;
  /** Reads of the inputs in flight (the model turn's watch and the loop may both read). */
  private reads = 0;
  private woken = false;
  protected abandoned = false;
  /** The lease's release, once given up (`releaseLease`). */
  private released: Promise<void> = Promise.resolve();
  protected job: JobHandle | null = null;
  /** The current job reached the machine (not only queued for a slot there), and when (epoch ms): its deadline runs from then. */
  protected jobSent = false;
  protected jobSentAt = 0;
  /**
   * A chat completion's events go to this instance's readers as they are made,
   * before they are stored (its stream has no resume: nothing a reader saw can be
   * renumbered by a takeover); its end only once stored. A run's events are handed
   * over once stored, so an id a reader saw survives the instance.
   */
  private readonly relayFirst: boolean;
  /** The run's tokens so far (stored, plus what this driver added). */
  protected readonly tokens: JobUsage;
  /** The run's spans on this instance (server/telemetry/spans.ts); a no-op when tracing is off. */
  protected readonly trace: RunTrace;

  constructor(
    protected readonly deps: DriverDeps,
    protected run: RunRow,
  ) {
    this.seq = run.last_seq;
    this.relayFirst = isModelTurn(run.source);
    this.costClass = costClassOf((run.route_kind ?? "user-hardware") as CostRoute);
    this.tokens = { inputTokens: Number(run.input_tokens), outputTokens: Number(run.output_tokens) };
    this.trace = runTrace(run, deps.store.instance, this.costClass);
  }

  get id(): string {
    return this.run.id;
  }

  /**
   * A run this instance has just created and drives from its first moment: it
   * has announced nothing (no call or approval to wait on), and a cancel can
   * only reach it as a wake, so its inputs are known without a read. (A run
   * claimed from elsewhere reads them once: a wake sent before it was driven
   * here is lost.)
   */
  startsFresh(): void {
    this.known = { cancel: null, budget: this.run.request.budget ?? null, toolCalls: new Map(), approvals: new Map(), messages: [] };
    this.stale = false;
  }

  /** The agent loop; resolves when the run has ended (or was abandoned). */
  protected abstract loop(): Promise<RunEnd>;

  async drive(): Promise<void> {
    this.trace.start();
    try {
      if (this.seq === 0) {
        this.emit("run_started", {
          runId: this.run.id,
          // A run driven was routed: to a machine, or to the service itself.
          route: this.run.route_kind!,
          costClass: this.costClass,
          machineId: this.run.machine_id,
          runtime: this.run.runtime_name,
          model: this.run.model,
          ...(this.run.request.billing ? { billing: this.run.request.billing } : {}),
          ...(this.run.request.budget ? { budget: { ...budgetView(this.run.request.budget)!, note: this.run.request.budgetNote ?? null } } : {}),
          ...(this.run.request.previousRunId ? { previousRunId: this.run.request.previousRunId } : {}),
          ...(this.run.request.session ? { session: this.run.request.session.resume ? ("resumed" as const) : ("new" as const) } : {}),
        });
        // The start knew the previous run's session could not be continued, and the app asked for a fresh one.
        if (this.run.request.sessionRestarted && this.run.request.previousRunId) this.emit("session_restarted", { previousRunId: this.run.request.previousRunId, reason: this.run.request.sessionRestarted });
        // A chat's readers have it from memory: it is stored with the turn's first write (often its only one).
        if (this.relayFirst) this.later({ status: "running" });
        // Not awaited: the first job goes out at once; writes stay in order, and a lost lease shows at the next one.
        else this.flush({ status: "running" }).catch(() => {});
      }
      const { output, stopReason, patch, extra, completion } = await this.loop();
      this.endJobWatch?.();
      this.emit("run_completed", { output, usage: { ...this.tokens, costClass: this.costClass, amountMicros: 0 }, stopReason, ...completion });
      // The last turn's own writes go with the completion: one write.
      await this.flush({ ...patch, status: "completed", output, stopReason, finished: true }, extra);
      this.trace.end({ status: "completed", stopReason }, this.tokens);
    } catch (err) {
      await this.end(err);
    }
  }

  /** Ends the run without running it: failed (nobody could drive it), or cancelled (asked while it waited for its machine). */
  fail(stop: RunStop | Cancelled): Promise<void> {
    this.trace.start();
    return this.end(stop);
  }

  /** Records how the run ended: cancelled, or failed with its reason. */
  private async end(err: unknown): Promise<void> {
    this.job?.cancel("the run ended");
    this.endJobWatch?.();
    if (err instanceof Abandoned || this.abandoned) return this.trace.end({ status: "moved" }, this.tokens);
    let outcome: TraceOutcome;
    try {
      if (err instanceof Cancelled) {
        outcome = { status: "cancelled" };
        this.emit("run_cancelled", { ...(err.reason ? { reason: err.reason } : {}), output: this.partialOutput() });
        await this.flush({ status: "cancelled", stopReason: "cancelled", output: this.partialOutput(), finished: true });
      } else {
        const stop = err instanceof RunStop ? err : new RunStop("internal_error");
        outcome = { status: "failed", code: stop.code, message: stop.message, stopReason: stop.stopReason };
        if (!(err instanceof RunStop)) this.deps.log.error({ err, runId: this.run.id }, "run driver failed");
        this.emit("run_failed", { error: { code: stop.code, message: stop.message }, stopReason: stop.stopReason });
        await this.flush({ status: "failed", stopReason: stop.stopReason, error: { code: stop.code, message: stop.message }, output: this.partialOutput(), finished: true });
      }
    } catch (final) {
      if (final instanceof Abandoned) outcome = { status: "moved" };
      else this.deps.log.error({ err: final, runId: this.run.id }, "could not record the end of a run");
    }
    this.trace.end(outcome!, this.tokens);
  }

  /**
   * An answer or a cancel may have arrived. An answer taken on this instance
   * comes with what it was (already stored), so the driver need not read it back;
   * any other wake (a notification, the sweep) makes it read the database.
   */
  wake(answer?: Answer): void {
    // A read in flight may have begun before this answer was stored: its result will not have it.
    if (!answer || !this.known || !this.apply(this.known, answer) || this.reads > 0) this.stale = true;
    this.woken = true;
    this.wakeUp?.();
  }

  /** Ends a wait of the loop's own (a turn ended): nothing new to read. */
  protected nudge(): void {
    this.woken = true;
    this.wakeUp?.();
  }

  private remember(extra: Omit<Writes, "events" | "patch">): void {
    const known = this.known;
    // A read in flight began before these rows: what it brings replaces `known` without them, so read again after.
    if (!known || this.stale || this.reads > 0) return void (this.stale = true);
    for (const c of extra.toolCalls ?? []) {
      if (!known.toolCalls.has(c.call_id)) known.toolCalls.set(c.call_id, { call_id: c.call_id, result: null, is_error: null, answered: false, deadline_at: c.deadline_at });
    }
    for (const a of extra.approvals ?? []) {
      if (!known.approvals.has(a.approval_id)) {
        known.approvals.set(a.approval_id, { approval_id: a.approval_id, request: a.request as AnsweredApproval["request"], decision: null, reason: null, answered: false, deadline_at: a.deadline_at });
      }
    }
  }

  private apply(known: RunInputs, a: Answer): boolean {
    if (a.kind === "message") {
      const pending = (known.messages ??= []);
      if (!pending.some((m) => m.message_id === a.messageId) && !this.handedOver.has(a.messageId)) pending.push({ message_id: a.messageId, content: a.content });
      return true;
    }
    if (a.kind === "cancel") {
      known.cancel = { reason: a.reason };
      return true;
    }
    if (a.kind === "tool") {
      const c = known.toolCalls.get(a.callId);
      if (!c) return false;
      Object.assign(c, { answered: true, result: a.result, is_error: a.isError });
      return true;
    }
    const ap = known.approvals.get(a.approvalId);
    if (!ap) return false;
    Object.assign(ap, { answered: true, decision: a.decision, reason: a.reason });
    return true;
  }

  /** Another instance owns the run now, or this one is stopping: drop it without writing. */
  abandon(): void {
    this.abandoned = true;
    this.job?.cancel("the run moved to another instance");
    // Now, not when the loop notices: an instance stopping exports its spans before it exits.
    this.trace.end({ status: "moved" }, this.tokens);
    this.wake();
  }

  /** What the run's next write stores of where it stands with its job (an agent run's place in its job), or nothing. */
  protected checkpoint(): RunPatch | null {
    return null;
  }

  /** A checkpoint is stored (the job's events up to it need not be kept by the machine). */
  protected checkpointStored(_place: RunPatch): void {}

  /** What the model said so far in the current turn (kept on a cancel). */
  protected partialOutput(): string {
    return "";
  }

  /** Buffers the run's next event: `data` is checked against the contract's `RunEvent` of that `kind`. */
  protected emit<K extends RunEvent["kind"]>(kind: K, data: Omit<RunEventOf<K>, "kind">): void {
    const event: StoredEvent = { seq: ++this.seq, kind, data: { kind, ...data } as RunEventOf<K> };
    this.buffer.push(event);
    if (this.relayFirst && !isFinalRunEvent(kind)) this.deps.bus.publish(this.run.id, [event], this.deps.clock.now());
  }

  /**
   * A patch with nothing to wait for (a turn begun: status `running`) goes with
   * the run's next write, not in one of its own: the round trip it would put
   * between an answer and the next turn's events is saved. A patch given to that
   * write wins over it.
   */
  protected later(patch: RunPatch): void {
    this.deferred = { ...this.deferred, ...patch };
  }

  /** Stores buffered events (and a patch, rows) in one write, then hands the events to this instance's readers. */
  protected flush(patch?: RunPatch, extra: Omit<Writes, "events" | "patch"> = {}): Promise<void> {
    const events = this.buffer;
    this.buffer = [];
    if (this.deferred) {
      patch = { ...this.deferred, ...patch };
      this.deferred = null;
    }
    // Where the run stands with its job goes with the events it produced, in the same write.
    const place = this.checkpoint();
    if (place) patch = { ...patch, ...place };
    const step = this.writing.then(async () => {
      if (this.abandoned) throw new Abandoned();
      // New calls and approvals: the inputs known so far get them as this driver made them (unanswered), not by a read.
      if (extra.toolCalls?.length || extra.approvals?.length) this.remember(extra);
      // Every write waits out an outage, in order (nothing lost, no gap); past the outage limit the run itself is stopped (`outageFault`), and its end written after.
      const owned = await this.trace.ledger(extra.usage?.length ?? 0, () => this.throughOutage(() => this.deps.store.write(this.run.id, this.run.end_user_id, this.deps.clock.now(), { events, patch, ...extra }), true));
      if (!owned) {
        this.abandoned = true;
        throw new Abandoned();
      }
      if (place) this.checkpointStored(place);
      const unseen = this.relayFirst ? events.filter((e) => isFinalRunEvent(e.kind)) : events;
      if (unseen.length) this.deps.bus.publish(this.run.id, unseen, this.deps.clock.now());
      // Its tokens and charges may cross the plan's thresholds; a run the start found nothing to limit (a runs plan counted there, no plan) crosses none here.
      if (patch?.finished && this.run.request.unlimited !== true) void this.deps.facts?.checkThresholds({ appId: this.run.app_id, environment: this.run.environment }, this.run.end_user_id, this.deps.clock.now());
      if (patch?.finished) {
        this.deps.ended?.(patch.status!, this.run.route_kind);
        void this.deps.facts?.runFinished(this.run, { status: patch.status as RunOutcome["status"], stopReason: patch.stopReason ?? null, usage: { inputTokens: this.tokens.inputTokens, outputTokens: this.tokens.outputTokens, costClass: this.costClass } });
      }
    });
    this.writing = step.catch(() => {});
    return step;
  }

  /** A text delta of a turn, merged into the one before it while that is not stored yet (see `DELTA_MERGE_CHARS`). */
  protected emitText(turn: number, text: string): void {
    const last = this.buffer.at(-1)?.data;
    // Relayed first: an event a reader has is never changed after, so a chat's deltas are stored as they came.
    if (!this.relayFirst && last?.kind === "text_delta" && last.turn === turn && last.text.length < DELTA_MERGE_CHARS) {
      last.text += text;
    } else {
      this.emit("text_delta", { turn, text });
    }
    this.flushSoon();
  }

  /**
   * Streamed events are written in batches: at once after a quiet spell, then at most once per `DELTA_WINDOW_MS`.
   * Relayed first, they wait a whole `RELAYED_DELTA_WINDOW_MS` from the first one not written, a quiet spell or not:
   * their reader has them, so a completion shorter than the window is written once, at its end, and its end's write
   * does not wait behind a write of its first words (≈ 2 ms of a short completion's time on Postgres).
   */
  protected flushSoon(): void {
    if (this.deltaTimer) return;
    const wait = this.relayFirst ? RELAYED_DELTA_WINDOW_MS : Math.max(0, this.lastDeltaFlush + DELTA_WINDOW_MS - performance.now());
    this.deltaTimer = setTimeout(() => {
      this.deltaTimer = null;
      this.lastDeltaFlush = performance.now();
      // Taken by a write meanwhile (an end, a tool call): nothing left to write.
      if (this.buffer.length) this.flush().catch(() => {});
    }, wait);
  }

  /** How a job's `failed` event ends the run: the service's own reason when it stopped the job, else the machine's. */
  protected failure(e: { code: string; message: string }): RunStop {
    const stopped = this.stopped;
    this.stopped = null;
    return stopped ?? RunStop.reported(e);
  }

  /** Was this `failed` event the service's own stop (a limit, a deadline), not the machine's? */
  protected stoppedHere(): boolean {
    return this.stopped !== null;
  }

  /** Waits for a wake or `ms`, whichever is first. */
  protected async waitWake(ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return;
    }
    await new Promise<void>((resolve) => {
      // Woken by nobody in time: a notification may have been lost, so read again.
      const timer = setTimeout(() => ((this.stale = true), resolve()), Math.max(0, ms));
      this.wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wakeUp = null;
    this.woken = false;
  }

  /**
   * A database step of the run, carried through an outage: while the database is
   * unreachable it is tried again (100 ms, doubling to 1 s), the run going on
   * meanwhile (its events held in memory, nothing acknowledged). Past the
   * configured outage length (`RUN_DATABASE_OUTAGE_SECONDS`) a read fails the run
   * `database_unavailable`; a `write` keeps trying (the run's writes stay whole and
   * in order) while the run is stopped (`outageFault`), unless the instance stops
   * driving it. `once`: a read whose last answer may stand in, given up at the
   * first failure (`DatabaseAway`).
   */
  protected async throughOutage<T>(step: () => Promise<T>, write = false, once = false): Promise<T> {
    let since = 0;
    let wait = 100;
    for (;;) {
      try {
        return await step();
      } catch (err) {
        if (!isDatabaseUnavailable(err)) throw err;
        this.deps.outage?.report(err);
        if (once) throw new DatabaseAway();
        if (this.abandoned) throw new Abandoned();
        since ||= Date.now();
        const limit = this.deps.limits.databaseOutageMs;
        if (Date.now() - since > limit) {
          const stop = new RunStop("database_unavailable", `The service's database was unreachable for longer than the ${Math.round(limit / 1000)} s a run waits for it; the run cannot go on.`);
          if (!write) throw stop;
          this.outageFault(stop);
        }
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(wait * 2, 1000);
      }
    }
  }

  /**
   * A write held past the outage limit: the run is stopped (its machine's job
   * cancelled, its loop told at its next look at the inputs); the writes held
   * and its end are written, in order, once the database is back.
   */
  private outageFault(stop: RunStop): void {
    if (this.fault) return;
    this.fault = stop;
    this.deps.log.warn({ runId: this.run.id, reason: stop.message }, "run stopped: the database was away too long");
    this.stopJob?.(stop);
    this.wake();
  }

  /** User messages handed to the agent by this driver (a read in flight may still list them as pending). */
  private readonly handedOver = new Set<string>();

  /**
   * The user messages added while the run works and not handed to the agent yet, taken now: each gets its
   * `user_message` event (`delivery` as it is handed over), and the write that stores the events marks them
   * delivered (`Writes.delivered`), so each is delivered once, also across a takeover.
   */
  protected takeMessages(inputs: RunInputs, delivery: MessageDelivery): { taken: { message_id: string; content: string }[]; delivered: { message_id: string; seq: number }[] } {
    const taken = (inputs.messages ?? []).filter((m) => !this.handedOver.has(m.message_id));
    if (inputs.messages) inputs.messages = [];
    const delivered = taken.map((m) => {
      this.handedOver.add(m.message_id);
      this.emit("user_message", { messageId: m.message_id, content: m.content, delivery });
      return { message_id: m.message_id, seq: this.seq };
    });
    return { taken, delivered };
  }

  /** Has the app set a budget on the run (as last read)? */
  protected budgetSet(): boolean {
    return Boolean(this.known?.budget);
  }

  /** Reads the run's inputs; a cancel or a lost lease ends the wait. */
  protected async inputs(): Promise<RunInputs> {
    if (this.abandoned) throw new Abandoned();
    if (this.fault) throw this.fault;
    let known = this.known;
    if (this.stale || !known) {
      // Cleared before the read: whatever happens while it is in flight marks it stale again.
      this.stale = false;
      this.reads++;
      try {
        known = this.known = await this.throughOutage(() => this.deps.store.inputs(this.run.id), false, known !== null);
      } catch (err) {
        this.stale = true;
        // The database away: the answers known so far stand (an answer cannot be taken meanwhile); read again at the next wake.
        if (!(err instanceof DatabaseAway) || !known) throw err;
      } finally {
        this.reads--;
      }
    }
    if (this.fault) throw this.fault;
    if (known.cancel) throw new Cancelled(known.cancel.reason);
    return known;
  }

  /**
   * Sends a job to the run's machine, connected to this instance, and watches
   * what comes back: past a per-run limit (events stored, bytes, permission
   * requests, tool calls) or the job's deadline (a model turn's, an agent run's),
   * the job is cancelled and ends as `failed` with the service's reason
   * (`limit_exceeded`, `turn_timeout`, `run_timeout`); nothing more of it is taken.
   * A job too large for the link is never sent: `conversation_too_large`.
   */
  protected dispatch(job: Job, onEvent: (e: JobEvent, n?: number) => void, turn?: TurnTrace, resume?: { jobId: string; after: number; sentAt?: number }): JobHandle {
    const owner = { appId: this.run.app_id, environment: this.run.environment, endUserId: this.run.end_user_id };
    const limits = this.deps.limits;
    let ended = false;
    let handle: JobHandle | null = null;
    let timer: NodeJS.Timeout | null = null;
    // The time the job spends with the end user's machine (queued there included) counts for the request
    // waiting on it, in its Server-Timing (a run driven outside any request counts for none).
    const machineDone = this.run.route_kind === "service" ? null : machineTimer(this.waitedBy);
    const finish = () => {
      ended = true;
      machineDone?.();
      if (timer) clearTimeout(timer);
      if (this.endJobWatch === finish) this.endJobWatch = null;
      if (this.stopJob === stop) this.stopJob = null;
    };
    const stop = (why: RunStop) => {
      if (ended) return;
      finish();
      this.stopped = why;
      this.deps.log.warn({ runId: this.run.id, machineId: this.run.machine_id, stopReason: why.stopReason, reason: why.message }, "run stopped by a limit");
      handle?.cancel(why.message);
      onEvent({ type: "failed", code: why.code, message: why.message });
    };
    const over = (what: string, limit: number) => new RunStop("limit_exceeded", `The machine passed this run's limit of ${limit} ${what}; the run was stopped.`);
    const watch = (e: JobEvent, bytes: number, n?: number) => {
      if (ended) return;
      const r = this.received;
      r.bytes += bytes;
      if (r.bytes > limits.maxEventBytes) return stop(over("bytes of events", limits.maxEventBytes));
      if (e.type === "permission_request" && ++r.permissionRequests > limits.maxPermissionRequests) return stop(over("permission requests", limits.maxPermissionRequests));
      if (e.type === "tool_call" && ++r.toolCalls > limits.maxToolCalls) return stop(over("tool calls", limits.maxToolCalls));
      if (e.type === "done" || e.type === "failed") finish();
      else if (this.seq >= limits.maxEvents) return stop(over("stored events", limits.maxEvents));
      onEvent(e, n);
    };
    const own = this.run.request.limits;
    const [ms, code, what]: [number, RunStopCode, string] =
      job.kind === "model_turn"
        ? [own?.turnTimeoutMs ?? limits.turnTimeoutMs, "turn_timeout", "A model turn"]
        : [own?.runTimeoutMs ?? limits.agentRunTimeoutMs, "run_timeout", "The agent run"];
    // The job's deadline runs from when it is sent; one waiting for a slot has the queue's deadline instead.
    // Its reason is made only if it passes (an Error captures a stack: made for every job, it cost 1-2 % of the service's CPU).
    const deadline = (after: number, why: () => RunStop) => {
      if (timer) clearTimeout(timer);
      timer = setTimeout(() => stop(why()), after);
      timer.unref();
    };
    this.jobSent = false;
    const sent = () => {
      this.jobSent = true;
      // A job taken back after a lost link keeps the deadline it had from its first sending.
      this.jobSentAt = resume?.sentAt ?? this.deps.clock.now().getTime();
      deadline(Math.max(0, this.jobSentAt + ms - this.deps.clock.now().getTime()), () => new RunStop(code, `${what} passed its deadline of ${Math.round(ms / 1000)} s ${this.run.route_kind === "service" ? "on svc/echo" : "on the user's machine"}; it was stopped.`));
    };
    /** When a queued job stops waiting: set when it first waits, the same when its place moves up. */
    let queuedUntil: string | null = null;
    const queue = {
      onQueued: (place: number, cap: number) => {
        if (ended) return;
        const waitMs = limits.queueWaitMs;
        const runtime = job.runtime;
        const moved = queuedUntil !== null;
        queuedUntil ??= new Date(this.deps.clock.now().getTime() + waitMs).toISOString();
        this.emit("run_queued", {
          machineId: this.run.machine_id!,
          runtime,
          place,
          reason: `${runtime} on the user's machine is running ${cap} job${cap === 1 ? "" : "s"}, its cap (maxConcurrentJobs); the run goes on when a slot frees`,
          deadlineAt: queuedUntil,
        });
        void this.flush({ status: "queued" }).catch(() => {});
        // Moved up the queue: the same deadline as when it began to wait.
        if (moved) return;
        deadline(waitMs, () => new RunStop("compute_busy", `The run waited ${Math.round(waitMs / 1000)} s (RUN_QUEUE_WAIT_SECONDS) for a free slot of ${runtime} on the user's machine, which stayed at its cap of ${cap}; retry later, or let the route fall back to another runtime or the app.`));
      },
      onSent: () => {
        if (ended) return;
        sent();
        // What waited for the job to reach the machine (a user's message for the agent) goes now.
        this.nudge();
        void this.flush({ status: "running" }).catch(() => {});
      },
    };
    try {
      // A traced job carries its span's trace context to the machine, whose own spans of it come back under that span.
      const traced = turn?.traceparent ? { traceparent: turn.traceparent, onSpans: (sentAt: number, spans: JobSpanRecord[]) => turn.machineSpans(sentAt, spans) } : undefined;
      handle =
        this.run.route_kind === "service"
          ? this.deps.echo.dispatch(job, watch)
          : resume
            ? this.deps.hub.resume(owner, this.run.machine_id!, job.runtime, resume.jobId, resume.after, watch)
            : this.deps.hub.dispatch(owner, this.run.machine_id!, job, watch, queue, traced);
    } catch (err) {
      finish();
      if (err instanceof JobTooLarge) throw new RunStop("conversation_too_large", err.message);
      // A follow-up's session that this machine's worker cannot keep: the agent run decides (refuse, or begin afresh).
      if (err instanceof SessionsUnsupported) throw err;
      // The machine is connected elsewhere now (or nowhere): its holder takes the run over.
      this.releaseLease();
      throw new Abandoned();
    }
    turn?.job(handle.jobId);
    // Sent at once (not queued): its own deadline starts now.
    if (!timer) sent();
    this.endJobWatch?.();
    this.endJobWatch = finish;
    this.stopJob = stop;
    this.job = handle;
    return handle;
  }

  /**
   * Stops driving here and gives the lease up once the writes already begun are
   * in: the instance holding the machine's connection takes the run over, now or
   * when the machine comes back within the grace (the engine's sweep fails it after).
   */
  protected releaseLease(): void {
    this.abandoned = true;
    // What waited for the next write goes first (a turn begun: the taker runs it again behind `turn_restarted`, which is counted).
    const patch = this.deferred;
    this.deferred = null;
    this.released = this.writing
      .then(async () => {
        if (patch) await this.deps.store.write(this.run.id, this.run.end_user_id, this.deps.clock.now(), { patch }).catch(() => {});
        await this.deps.store.release(this.run.id, this.deps.clock.now());
      })
      .catch(() => {});
  }

  /**
   * Resolves once this driver has nothing more to write, its lease given up included. The engine keeps a
   * driver until then: a release landing after a new driver of the same run took the lease here would
   * give up that driver's lease (a lease is held by an instance, not by a driver).
   */
  settled(): Promise<void> {
    return Promise.all([this.writing, this.released]).then(() => {});
  }

  /** It stopped without ending the run (moved, its link lost, or its lease lost): the run goes on elsewhere or later. */
  get moved(): boolean {
    return this.abandoned;
  }

  /** A usage event and its ledger row, for one turn (its unique key stops a retried turn counting twice). */
  protected usage(turn: number, inputTokens: number, outputTokens: number, cache: { cacheReadTokens?: number; cacheWriteTokens?: number } = {}): { row: NewUsageRow } {
    this.tokens.inputTokens += inputTokens;
    this.tokens.outputTokens += outputTokens;
    // Prompt-cache tokens (agent CLIs report them) are said apart from input, in the event and in the ledger row.
    const cached = {
      ...(cache.cacheReadTokens ? { cacheReadTokens: cache.cacheReadTokens } : {}),
      ...(cache.cacheWriteTokens ? { cacheWriteTokens: cache.cacheWriteTokens } : {}),
    };
    if (cached.cacheReadTokens) this.tokens.cacheReadTokens = (this.tokens.cacheReadTokens ?? 0) + cached.cacheReadTokens;
    if (cached.cacheWriteTokens) this.tokens.cacheWriteTokens = (this.tokens.cacheWriteTokens ?? 0) + cached.cacheWriteTokens;
    this.emit("usage", { turn, usage: { inputTokens, outputTokens, ...cached, costClass: this.costClass, amountMicros: 0 } });
    return {
      row: {
        cost_class: this.costClass,
        kind: "tokens",
        input_tokens: inputTokens,
        output_tokens: outputTokens,
        cache_read_tokens: cached.cacheReadTokens ?? 0,
        cache_write_tokens: cached.cacheWriteTokens ?? 0,
        amount_micros: 0,
        period: periodOf(this.deps.clock.now()),
        unique_key: `tokens:${this.run.id}:${turn}`,
      },
    };
  }
}
