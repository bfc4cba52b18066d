import { ServeInAppError } from "./errors.js";
import { newIdempotencyKey, seg, type RequestOptions } from "./client.js";
import { mayRetry, openEventStream, retryDelayMs, sleep } from "./http.js";
import { cancelRun, RunStream, sendRunMessage, type FirstConnection, type RunDriverDeps, type RunStreamOptions } from "./run-stream.js";
import type { ApprovalHandler, RunCreateParams, RunEventsOptions, RunResult, RunTool } from "./types.js";
import type {
  CancelRunResponse,
  RaiseBudgetResponse,
  Run,
  RunBudget,
  RunCreateBody,
  RunMessageParams,
  RunMessageResponse,
  RunUsageReport,
  RunUsageResponse,
} from "./wire.js";

/** `svc.runs`: start runs and drive them, read them, cancel them, re-attach to them. */
export class Runs {
  readonly #deps: RunDriverDeps;

  /** @internal */
  constructor(deps: RunDriverDeps) {
    this.#deps = deps;
  }

  /**
   * Starts a run and drives it: returns at once a `RunStream` of its events,
   * answering its tool calls (`tools[].run`) and approvals (`onApproval`) as they
   * come, and re-attaching if the stream drops.
   *
   * `POST /v1/runs` carries an `Idempotency-Key` (`idempotencyKey`, or a random one),
   * the same on each try. It is tried again only when the first try was not applied: a
   * `429`, a `503` with `Service-Nothing-Created` (the service's database was unreachable
   * before the run was written), or a connection refused before anything was sent;
   * after `Retry-After`, up to `maxRetries` times. Never once its stream began, nor
   * after any other failure: a run is counted once started. Its refusal
   * (402, 409 `no_compute`, ...) rejects the iteration, `result()` and `runId` with
   * the typed `SvcError`. On 409 `serve_in_app`, `serveInApp` (when given) serves
   * the run in the app and its usage is reported: the stream then has no events
   * and `result()` has status `handed_back`.
   *
   * With `previousRunId` it continues that ended run's conversation (`run.followUp(prompt)`
   * does this for you); `model`, `system` and `tools` omitted are then the previous run's.
   */
  create(params: RunCreateParams): RunStream {
    return this.#create(params, { tools: params.tools, onApproval: params.onApproval });
  }

  /**
   * Starts a run; `answering` are the tools and approval handler its driver answers with (a
   * follow-up's, when not given, are the previous run's, whose definitions the service keeps).
   */
  #create(params: RunCreateParams, answering: { tools?: RunTool[]; onApproval?: ApprovalHandler }): RunStream {
    const { user, prompt, system, tools, route, limits, budget, metadata, previousRunId, onSessionLost } = params;
    // A new run asks for `auto` by default; a follow-up that names no model keeps the previous run's (the service's default).
    const model = params.model ?? (previousRunId === undefined ? "auto" : undefined);
    const body: RunCreateBody = {
      user,
      prompt,
      ...(model !== undefined ? { model } : {}),
      ...(system !== undefined ? { system } : {}),
      // The definitions only: `run` stays in the app. An empty list is sent only on a follow-up, where it replaces the kept tools.
      ...(tools?.length || (tools && previousRunId !== undefined) ? { tools: tools.map(({ name, description, parameters, needsApproval }) => ({ name, description, parameters, needsApproval })) } : {}),
      ...(route ? { route } : {}),
      ...(limits ? { limits } : {}),
      ...(budget ? { budget } : {}),
      ...(metadata ? { metadata } : {}),
      ...(previousRunId !== undefined ? { previousRunId } : {}),
      ...(onSessionLost !== undefined ? { onSessionLost } : {}),
    };
    const headers = { "idempotency-key": params.idempotencyKey ?? newIdempotencyKey() };
    const start = async (signal: AbortSignal, knowRunId: (id: string) => void): Promise<FirstConnection> => {
      try {
        for (let attempt = 0; ; attempt++) {
          try {
            const response = await openEventStream(this.#deps.http, { method: "POST", path: "/runs", body, headers }, signal);
            return { response, runId: response.headers.get("service-run-id") };
          } catch (err) {
            if (attempt >= this.#deps.http.maxRetries || !mayRetry(err, "create")) throw err;
            await sleep(retryDelayMs(attempt, err), signal);
          }
        }
      } catch (err) {
        if (err instanceof ServeInAppError && err.runId && params.serveInApp) {
          knowRunId(err.runId);
          return { handedBack: await this.#serveInApp(err.runId, params, model ?? "auto") };
        }
        throw err;
      }
    };
    return this.#stream({ start, user, tools: answering.tools, onApproval: answering.onApproval, signal: params.signal });
  }

  /** A `RunStream` whose `followUp` starts the next run of its conversation. */
  #stream(opts: Omit<RunStreamOptions, "followUp">): RunStream {
    const followUp: RunStreamOptions["followUp"] = (from, prompt, options = {}) =>
      this.#create(
        { ...options, user: from.user, prompt, previousRunId: from.runId },
        { tools: options.tools ?? from.tools, onApproval: options.onApproval ?? from.onApproval },
      );
    return new RunStream(this.#deps, { ...opts, followUp });
  }

  /**
   * Adds a user message to a run while it works (steering): `POST /v1/runs/:id/messages`.
   * An agent CLI gets it mid-turn (`delivery: "now"`); a model run before its next model call
   * (`next_turn`). The run's events record it as `user_message`. A run that has ended answers
   * `409 run_finished` (a `ConflictError`). It carries an `Idempotency-Key` (`options.idempotencyKey`,
   * or a random one), the same on each try: the same key twice delivers one message.
   */
  send(id: string, params: RunMessageParams, options?: RequestOptions): Promise<RunMessageResponse> {
    return sendRunMessage(this.#deps.api, id, { content: params.content, ...(params.user !== undefined ? { user: params.user } : {}) }, options);
  }

  /** The run as stored: where it stands, even when no stream is open. */
  get(id: string, options?: RequestOptions): Promise<Run> {
    return this.#deps.api.request({ method: "GET", path: `/runs/${seg(id)}`, options });
  }

  /** Cancels a run (best effort): its stream then ends with `run_cancelled`. A finished run answers 409 `run_finished`. */
  /**
   * Replaces a run's budget field by field (`maxMicros` as a string of integer micros, `maxTokens`).
   * A run paused at its budget resumes at once when the new one is above what it used.
   */
  raiseBudget(id: string, params: RunBudget & { user?: string }, options?: RequestOptions): Promise<RaiseBudgetResponse> {
    return this.#deps.api.request({ method: "POST", path: `/runs/${seg(id)}/budget`, body: params, retry: "idempotent", options });
  }

  cancel(id: string, params: { reason?: string; user?: string } = {}, options?: RequestOptions): Promise<CancelRunResponse> {
    return cancelRun(this.#deps.api, id, params, options);
  }

  /**
   * Reports what a run handed back with `serve_in_app` used, when the app served it
   * without `serveInApp` (which reports for you). Accepted once per run; a repeat is
   * `409 usage_already_reported`.
   */
  reportUsage(id: string, report: RunUsageReport, options: RequestOptions = {}): Promise<RunUsageResponse> {
    return this.#deps.api.request({ method: "POST", path: `/runs/${seg(id)}/usage`, body: report, retry: "idempotent", options: { idempotencyKey: newIdempotencyKey(), ...options } });
  }

  /**
   * Re-attaches to a run's stream (after a crash, from another process): the
   * stored events after `after`, then live ones until the run ends. Reading never
   * starts or cancels anything; with `tools` or `onApproval` it also answers.
   */
  events(id: string, options: RunEventsOptions = {}): RunStream {
    const { after, user, tools, onApproval, signal } = options;
    const start = async (signal: AbortSignal, knowRunId: (id: string) => void): Promise<FirstConnection> => {
      knowRunId(id);
      const headers: Record<string, string> = after !== undefined ? { "last-event-id": String(after) } : {};
      const response = await openEventStream(this.#deps.http, { method: "GET", path: `/runs/${seg(id)}/events`, headers }, signal);
      return { response, runId: id };
    };
    return this.#stream({ start, user, tools, onApproval, signal, after });
  }

  /** The app serves the handed-back run, then reports what it used (the run is already counted). */
  async #serveInApp(runId: string, params: RunCreateParams, model: string): Promise<RunResult> {
    const served = await params.serveInApp!({
      runId,
      user: params.user,
      prompt: params.prompt,
      model,
      ...(params.system !== undefined ? { system: params.system } : {}),
      tools: params.tools ?? [],
      ...(params.previousRunId !== undefined ? { previousRunId: params.previousRunId } : {}),
      ...(params.signal ? { signal: params.signal } : {}),
    });
    const { inputTokens, outputTokens, model: usedModel, costMicros } = served.usage;
    await this.reportUsage(runId, { user: params.user, inputTokens, outputTokens, ...(usedModel !== undefined ? { model: usedModel } : {}), ...(costMicros !== undefined ? { costMicros } : {}) });
    return {
      runId,
      status: "handed_back",
      output: served.output,
      usage: { inputTokens, outputTokens },
      route: "app",
      machineId: null,
      runtime: null,
      stopReason: "serve_in_app",
    };
  }
}
