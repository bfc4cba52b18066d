import { isFinalRunEvent } from "@svc/contract";
import { answerApproval, answerToolCall, backoffMs, type Answerer } from "./answers.js";
import { newIdempotencyKey, seg, type RequestOptions, type ResolvedClientOptions, type Transport } from "./client.js";
import { ConnectionError, MalformedEventError, UserAbortError } from "./errors.js";
import { isTransient, openEventStream, sleep } from "./http.js";
import { RunTally } from "./run-result.js";
import { readRunEvents } from "./sse.js";
import type { ApprovalHandler, RunFollowUpOptions, RunResult, RunSendOptions, RunTool } from "./types.js";
import type { CancelRunResponse, Run, RunEvent, RunMessageParams, RunMessageResponse } from "./wire.js";

/** What the run driver is built on: shared by every run of one `Svc`. */
export interface RunDriverDeps {
  http: ResolvedClientOptions;
  api: Transport;
  /** Re-attach attempts in a row without a new event before giving up. */
  maxReconnects: number;
}

/** `POST /runs/:id/messages`: a steering message, with an `Idempotency-Key` (the caller's, or a random one) kept across tries. */
export function sendRunMessage(api: Transport, id: string, body: RunMessageParams, options: RequestOptions = {}): Promise<RunMessageResponse> {
  return api.request({ method: "POST", path: `/runs/${seg(id)}/messages`, body, options: { ...options, idempotencyKey: options.idempotencyKey ?? newIdempotencyKey() } });
}

/** `POST /runs/:id/cancel`: an answer to the run, safe to repeat (a finished run answers 409). */
export function cancelRun(api: Transport, id: string, body: { reason?: string; user?: string }, options: RequestOptions = {}): Promise<CancelRunResponse> {
  return api.request({ method: "POST", path: `/runs/${seg(id)}/cancel`, body, retry: "idempotent", options: { idempotencyKey: newIdempotencyKey(), ...options } });
}

/** The first connection: a run's event stream, or a run the app served itself. */
export type FirstConnection = { response: Response; runId: string | null } | { handedBack: RunResult };

export interface RunStreamOptions {
  /** Opens the first connection (POST /runs, or GET /runs/:id/events); `knowRunId` as soon as the id is known. */
  start: (signal: AbortSignal, knowRunId: (id: string) => void) => Promise<FirstConnection>;
  user?: string;
  tools?: RunTool[];
  onApproval?: ApprovalHandler;
  signal?: AbortSignal;
  /** The sequence of the last event already seen (re-attaching). */
  after?: number;
  /** Starts the follow-up of an ended run (`Runs` gives it). */
  followUp: (from: { runId: string; user: string; tools?: RunTool[]; onApproval?: ApprovalHandler }, prompt: string, options?: RunFollowUpOptions) => RunStream;
}

/** A run's last event (the contract's one list of final kinds). */
const isFinal = (e: RunEvent): boolean => isFinalRunEvent(e.kind);

/** The service sends a keep-alive every 15 s: a stream silent for three of them is taken as dropped and re-attached. */
const STREAM_IDLE_MS = 45_000;

/**
 * A run as it happens: its events in order (`for await`), its id, its result.
 *
 * The driver starts at once and runs on its own: it answers tool calls and
 * approvals and re-attaches a dropped stream whether or not anyone iterates, and
 * buffers the events for whoever does. Iterate once; `result()` can be awaited
 * instead of, or after, iterating.
 *
 * Stopping to read (the `signal` aborting, or leaving the `for await` loop)
 * stops this driver, not the run: the service keeps it going (waiting for
 * answers until their deadlines). `cancel()` cancels the run.
 */
export class RunStream implements AsyncIterable<RunEvent> {
  /** The run's id, from the `Service-Run-Id` header: known before any event. Rejects if the run could not be started. */
  readonly runId: Promise<string>;
  #knowId!: (id: string) => void;
  #noId!: (err: unknown) => void;
  #id: string | null = null;

  readonly #deps: RunDriverDeps;
  readonly #opts: RunStreamOptions;
  /** Aborted when the driver stops, for whatever reason: ends the reading and tells the tools still running. */
  readonly #halt = new AbortController();
  readonly #signal: AbortSignal;
  /** Why the driver was stopped from inside (a failed answer, the loop left), when it was. */
  #stopError: unknown = null;

  readonly #tally = new RunTally();
  readonly #queue: RunEvent[] = [];
  #wake: (() => void) | null = null;
  #ended: { error: unknown } | { error?: undefined } | null = null;
  #iterated = false;
  readonly #result: Promise<RunResult>;
  /** The run was handed back to the app (`serve_in_app`): it has ended, with no events. */
  #handedBack = false;

  #lastSeen: number | null;
  /** Re-attach attempts since the last new event. */
  #failures = 0;
  #lastDrop: unknown = null;
  /** Calls and approvals answered (or being answered): never twice. */
  readonly #answered = new Set<string>();
  #answerer: Answerer | null = null;

  /** @internal */
  constructor(deps: RunDriverDeps, opts: RunStreamOptions) {
    this.#deps = deps;
    this.#opts = opts;
    this.#lastSeen = opts.after ?? null;
    this.#signal = opts.signal ? AbortSignal.any([opts.signal, this.#halt.signal]) : this.#halt.signal;
    this.runId = new Promise<string>((resolve, reject) => {
      this.#knowId = (id) => {
        this.#id ??= id;
        resolve(id);
      };
      this.#noId = reject;
    });
    this.#result = this.#drive().then(
      (result) => (this.#end(), result),
      (err: unknown) => {
        this.#end(err);
        throw err;
      },
    );
    // Nobody has to await these: a run whose failure nobody asks about is not an unhandled rejection.
    this.runId.catch(() => {});
    this.#result.catch(() => {});
  }

  /** How the run ended. Resolves once a final event came (or the run was handed back); the events need not be iterated. */
  result(): Promise<RunResult> {
    return this.#result;
  }

  /** Asks the service to cancel the run (best effort): the stream then ends with `run_cancelled`. */
  async cancel(reason?: string): Promise<CancelRunResponse> {
    const id = await this.runId;
    return cancelRun(this.#deps.api, id, { ...(reason !== undefined ? { reason } : {}), user: this.#opts.user });
  }

  /**
   * Adds a user message to the run while it works (steering): `POST /v1/runs/:id/messages`, with
   * the run's user. An agent CLI gets it mid-turn (`delivery: "now"`), a model run before its next
   * model call (`next_turn`); the stream yields it as a `user_message` event where it was delivered.
   * Once the run has ended the service answers `409 run_finished` (a `ConflictError`). The same
   * `idempotencyKey` twice delivers one message (default: a random key, kept across retries).
   */
  async send(text: string, options: RunSendOptions = {}): Promise<RunMessageResponse> {
    const id = await this.runId;
    const user = this.#opts.user;
    return sendRunMessage(this.#deps.api, id, { content: text, ...(user !== undefined ? { user } : {}) }, options);
  }

  /**
   * Continues the conversation once the run has ended: a new run with the same user, `prompt`, and
   * `previousRunId` set to this run's id (see `RunCreateParams.previousRunId`), driven like any
   * `svc.runs.create(...)`. Omitted, `tools` and `onApproval` are this run's, and the model and
   * `system` the previous run's (the service keeps them). Throws while the run has not ended
   * (steer a working run with `send` instead).
   */
  followUp(prompt: string, options: RunFollowUpOptions = {}): RunStream {
    const id = this.#id;
    if (!this.#tally.final && !this.#handedBack) {
      const why = this.#ended
        ? `its stream stopped before its end was seen; once it has ended, continue it with svc.runs.create({ user, prompt, previousRunId: "${id ?? "<run id>"}" })`
        : "a follow-up continues an ended run: wait for its end (await run.result()), or steer it while it works with run.send(text)";
      throw new Error(`svc: run ${id ?? "(not started)"} has not ended: ${why}.`);
    }
    const user = this.#opts.user;
    if (user === undefined) {
      throw new Error(`svc: run ${id} was re-attached without its user: pass { user } to svc.runs.events, or continue it with svc.runs.create({ user, prompt, previousRunId: "${id}" }).`);
    }
    return this.#opts.followUp({ runId: id!, user, tools: this.#opts.tools, onApproval: this.#opts.onApproval }, prompt, options);
  }

  /** The sequence number of the last event received: `svc.runs.events(runId, { after })` re-attaches from there. */
  get lastEventId(): number | null {
    return this.#lastSeen;
  }

  [Symbol.asyncIterator](): AsyncIterator<RunEvent> {
    if (this.#iterated) throw new Error("svc: a RunStream can be iterated only once.");
    this.#iterated = true;
    return {
      next: async (): Promise<IteratorResult<RunEvent>> => {
        for (;;) {
          // Events that came before a failure are still delivered, in order, then the failure.
          if (this.#queue.length) return { value: this.#queue.shift()!, done: false };
          if (this.#ended) {
            const { error } = this.#ended;
            this.#ended = {};
            if (error !== undefined) throw error;
            return { value: undefined, done: true };
          }
          await new Promise<void>((wake) => (this.#wake = wake));
        }
      },
      return: async (): Promise<IteratorResult<RunEvent>> => {
        this.#stop(new UserAbortError(`svc: the loop over run ${this.#id ?? "(not started)"} was left: this client stopped reading; the run goes on.`));
        this.#queue.length = 0;
        return { value: undefined, done: true };
      },
    };
  }

  async #drive(): Promise<RunResult> {
    try {
      const first = await this.#opts.start(this.#signal, (id) => this.#knowId(id));
      if ("handedBack" in first) {
        this.#handedBack = true;
        return first.handedBack;
      }
      if (first.runId) this.#knowId(first.runId);
      let response: Response | null = first.response;
      for (;;) {
        await this.#read(response);
        if (this.#tally.final) return await this.#finish();
        response = await this.#reattach();
      }
    } catch (err) {
      throw this.#stopError ?? err;
    }
  }

  /** Reads one connection until its final event or until it drops (returns), or the driver stops (throws). */
  async #read(response: Response): Promise<void> {
    try {
      for await (const frame of readRunEvents(response.body!, this.#signal, STREAM_IDLE_MS)) {
        if (frame.id !== null) {
          // A re-attached stream starts after Last-Event-ID; this guards against a server that repeats anyway.
          if (this.#lastSeen !== null && frame.id <= this.#lastSeen) {
            // Re-attached at or past the end of a finished run: the service sends its final event again (its id
            // not past ours) and closes. It tells how the run ended; the events to iterate were seen already.
            if (frame.data && isFinal(frame.data)) {
              this.#tally.add(frame.data);
              return;
            }
            continue;
          }
          this.#lastSeen = frame.id;
        }
        this.#failures = 0;
        if (frame.data) this.#take(frame.data);
        if (this.#tally.final) return;
      }
      if (!this.#signal.aborted) this.#lastDrop = new ConnectionError("svc: the stream ended before the run's final event.");
    } catch (err) {
      if (err instanceof MalformedEventError) throw err;
      if (!this.#signal.aborted) this.#lastDrop = err;
    }
    if (this.#signal.aborted) throw this.#abortError();
  }

  #take(event: RunEvent): void {
    if (event.kind === "run_started") this.#knowId(event.runId);
    this.#tally.add(event);
    this.#queue.push(event);
    this.#notify();
    if (event.kind === "tool_call") this.#answer(`tool:${event.callId}`, (a) => answerToolCall(a, event));
    if (event.kind === "approval_request") this.#answer(`approval:${event.approvalId}`, (a) => answerApproval(a, event));
  }

  /** Answers in the background: events keep flowing while a tool runs; a failed answer stops the driver. */
  #answer(key: string, answer: (a: Answerer) => Promise<void>): void {
    if (this.#answered.has(key)) return;
    this.#answered.add(key);
    const a = this.#answererFor();
    if (!a) return this.#stop(new ConnectionError("svc: the run asked for an answer before its id was known."));
    Promise.resolve(a)
      .then(answer)
      .catch((err: unknown) => this.#stop(err));
  }

  #answererFor(): Answerer | null {
    if (!this.#id) return null;
    return (this.#answerer ??= {
      api: this.#deps.api,
      runId: this.#id,
      user: this.#opts.user,
      tools: new Map((this.#opts.tools ?? []).map((t) => [t.name, t])),
      onApproval: this.#opts.onApproval,
      signal: this.#signal,
      retries: this.#deps.maxReconnects,
    });
  }

  /** Opens `GET /runs/:id/events` after the last event seen, with backoff; gives up after `maxReconnects` tries in a row. */
  async #reattach(): Promise<Response> {
    const id = this.#id;
    if (!id) throw new ConnectionError("svc: the run's stream ended before its id was known: it cannot be re-attached.", { cause: this.#lastDrop });
    for (;;) {
      if (this.#failures >= this.#deps.maxReconnects) {
        throw new ConnectionError(
          `svc: the stream of run ${id} dropped and ${this.#failures} attempt(s) to re-attach failed; re-attach later with runs.events("${id}"${this.#lastSeen !== null ? `, { after: ${this.#lastSeen} }` : ""}).`,
          { cause: this.#lastDrop },
        );
      }
      await sleep(backoffMs(this.#failures, this.#lastDrop), this.#signal).catch(() => {
        throw this.#abortError();
      });
      this.#failures++;
      try {
        const headers: Record<string, string> = this.#lastSeen !== null ? { "last-event-id": String(this.#lastSeen) } : {};
        return await openEventStream(this.#deps.http, { method: "GET", path: `/runs/${encodeURIComponent(id)}/events`, headers }, this.#signal);
      } catch (err) {
        if (this.#signal.aborted) throw this.#abortError();
        if (!isTransient(err)) throw err;
        this.#lastDrop = err;
      }
    }
  }

  /** The result; where the run ran comes from `run_started`, or from the run itself when the stream was joined later. */
  async #finish(): Promise<RunResult> {
    const id = this.#id!;
    this.#halt.abort(); // the run is over: tools still running are told, their results are not posted
    if (!this.#tally.started) {
      const run = await this.#deps.api.request<Run>({ method: "GET", path: `/runs/${seg(id)}` }).catch(() => null);
      if (run) ({ route: this.#tally.route, machineId: this.#tally.machineId, runtime: this.#tally.runtime } = run);
    }
    return this.#tally.result(id);
  }

  #abortError(): unknown {
    return (
      this.#stopError ??
      new UserAbortError(`svc: stopped reading run ${this.#id ?? "(not started)"}: aborted; the run goes on.`, { cause: this.#opts.signal?.reason })
    );
  }

  /** Stops the driver from inside; the first reason is the one reported. */
  #stop(err: unknown): void {
    if (this.#ended || this.#stopError) return;
    this.#stopError = err;
    this.#halt.abort();
  }

  #end(err?: unknown): void {
    this.#ended = err === undefined ? {} : { error: err };
    if (!this.#id) this.#noId(err ?? new Error("svc: the run has no id."));
    this.#halt.abort();
    this.#notify();
  }

  #notify(): void {
    this.#wake?.();
    this.#wake = null;
  }
}
