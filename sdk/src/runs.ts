import { ServeInAppError } from "./errors.js";
import { isRetryableAnswer, openEventStream, retryDelayMs, sleep } from "./http.js";
import { RunStream, type FirstConnection, type RunDriverDeps } from "./run-stream.js";
import type { CancelRunResponse, Run, RunCreateParams, RunEventsOptions, RunResult } from "./types.js";

/** `svc.runs`: start runs and drive them, read them, cancel them, re-attach to them. */
export class Runs {
  readonly #deps: RunDriverDeps;

  constructor(deps: RunDriverDeps) {
    this.#deps = deps;
  }

  /**
   * Starts a run and drives it: returns at once a `RunStream` of its events,
   * answering its tool calls (`tools[].run`) and approvals (`onApproval`) as they
   * come, and re-attaching if the stream drops.
   *
   * `POST /v1/runs` is tried again only when its answer says nothing was created: a
   * `429`, or a `503` with `Service-Nothing-Created` (the service's database was
   * unreachable before the run was written), after `Retry-After`, up to `maxRetries`
   * times. Never once its stream began, nor after any other failure: a run is counted
   * once started. Its refusal
   * (402, 409 `no_compute`, ...) rejects the iteration, `result()` and `runId` with
   * the typed `SvcError`. On 409 `serve_in_app`, `serveInApp` (when given) serves
   * the run in the app and its usage is reported: the stream then has no events
   * and `result()` has status `handed_back`.
   */
  create(params: RunCreateParams): RunStream {
    const { user, prompt, model = "auto", system, tools, route, limits, metadata } = params;
    const body = {
      user,
      prompt,
      model,
      ...(system !== undefined ? { system } : {}),
      // The definitions only: `run` stays in the app.
      ...(tools?.length ? { tools: tools.map(({ name, description, parameters, needsApproval }) => ({ name, description, parameters, needsApproval })) } : {}),
      ...(route ? { route } : {}),
      ...(limits ? { limits } : {}),
      ...(metadata ? { metadata } : {}),
    };
    const start = async (signal: AbortSignal, knowRunId: (id: string) => void): Promise<FirstConnection> => {
      try {
        for (let attempt = 0; ; attempt++) {
          try {
            const response = await openEventStream(this.#deps.http, { method: "POST", path: "/runs", body }, signal);
            return { response, runId: response.headers.get("service-run-id") };
          } catch (err) {
            if (attempt >= this.#deps.http.maxRetries || !isRetryableAnswer(err, true)) throw err;
            await sleep(retryDelayMs(attempt, err), signal);
          }
        }
      } catch (err) {
        if (err instanceof ServeInAppError && err.runId && params.serveInApp) {
          knowRunId(err.runId);
          return { handedBack: await this.#serveInApp(err.runId, params, model) };
        }
        throw err;
      }
    };
    return new RunStream(this.#deps, { start, user, tools, onApproval: params.onApproval, signal: params.signal });
  }

  /** The run as stored: where it stands, even when no stream is open. */
  get(id: string): Promise<Run> {
    return this.#deps.api.getRun({ params: { id } });
  }

  /** Cancels a run (best effort): its stream then ends with `run_cancelled`. A finished run answers 409 `run_finished`. */
  cancel(id: string, options: { reason?: string; user?: string } = {}): Promise<CancelRunResponse> {
    return this.#deps.api.cancelRun({ params: { id }, body: options });
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
      const response = await openEventStream(this.#deps.http, { method: "GET", path: `/runs/${encodeURIComponent(id)}/events`, headers }, signal);
      return { response, runId: id };
    };
    return new RunStream(this.#deps, { start, user, tools, onApproval, signal, after });
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
      ...(params.signal ? { signal: params.signal } : {}),
    });
    const { inputTokens, outputTokens, model: usedModel, costMicros } = served.usage;
    await this.#deps.api.reportRunUsage({
      params: { id: runId },
      body: { user: params.user, inputTokens, outputTokens, ...(usedModel !== undefined ? { model: usedModel } : {}), ...(costMicros !== undefined ? { costMicros } : {}) },
    });
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
