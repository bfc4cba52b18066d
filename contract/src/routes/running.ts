import { z } from "zod";
import { meta } from "../credentials.js";
import { ChatCompletion, ChatCompletionRequest, ModelList } from "../chat.js";
import {
  ApprovalRequest,
  ApprovalResponse,
  CancelRequest,
  CancelResponse,
  CreateRunRequest,
  RaiseBudgetRequest,
  RaiseBudgetResponse,
  Run,
  RunMessageRequest,
  RunMessageResponse,
  RunUsage,
  RunUsageResponse,
  ToolResultRequest,
  ToolResultResponse,
} from "../runs.js";
import { appKeyErrors, c, errors, eventStream, notBuilt, OPTIONS, runId } from "./shared.js";

/** Running: chat completions, runs and their answers, models (1-6). */
export const runningContract = c.router(
  {
    // 1
    createChatCompletion: {
      method: "POST",
      path: "/v1/chat/completions",
      summary: "Chat completions, OpenAI-compatible",
      description:
        "The standard chat-completions request plus `user` (required). `svc/echo` is answered by the service itself; `auto` and aliases route to a model runtime on the user's own machine, never to a subscription runtime. With `stream: true` the answer is `text/event-stream` of `chat.completion.chunk` frames ending in `data: [DONE]`. The run id is in the `Service-Run-Id` header.",
      body: ChatCompletionRequest,
      responses: { 200: ChatCompletion, ...errors(402, 409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 2
    createRun: {
      method: "POST",
      path: "/v1/runs",
      summary: "Start a run",
      description:
        "Starts one run for `user`; the service owns the agent loop. The answer is a `text/event-stream` of run events (see `RunEvent`), with `Service-Run-Id` in the headers before the first event. Not idempotent. 409 `serve_in_app` when nothing is reachable and the route allows `app` (the run is counted, its id in `Service-Run-Id`); 409 `no_compute` when the route does not allow `app`; 402 when the plan stops at its allowance. With `previousRunId` it continues that run's conversation (see `CreateRunRequest`): 404 for a run that is not this user's, 409 `run_active`, `session_unavailable` or `conversation_unavailable` when it cannot.",
      body: CreateRunRequest,
      responses: { 200: eventStream, ...errors(402, 409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: where a run stands
    getRun: {
      method: "GET",
      path: "/v1/runs/:id",
      summary: "Read a run",
      description: "The run as stored: status, route, machine, output, stop reason, usage and the id of its last event.",
      pathParams: runId,
      responses: { 200: Run, ...appKeyErrors },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: re-attach to a run's stored events
    getRunEvents: {
      method: "GET",
      path: "/v1/runs/:id/events",
      summary: "Re-attach to a run's event stream",
      description:
        "The run's stored events after `Last-Event-ID` (header; or `after` in the query), then live ones until the run ends: no gap, no duplicate. At or past a finished run's last event: its final event again (its own id), then the stream ends. A reader more than 1 MiB behind is closed (`: closed: slow reader`) and re-attaches from its last id. A dropped stream never cancels a run.",
      pathParams: runId,
      headers: z.object({ "last-event-id": z.string().regex(/^\d{1,9}$/, "the sequence number of the last event received").optional() }),
      query: z.object({ after: z.coerce.number().int().min(0).max(999_999_999).optional().describe("Same as `Last-Event-ID`, for clients that cannot set headers.") }),
      // 409 run_finished: a run handed back to the app has no stream.
      responses: { 200: eventStream, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 3
    submitToolResult: {
      method: "POST",
      path: "/v1/runs/:id/tool_result",
      summary: "Answer a tool call",
      pathParams: runId,
      body: ToolResultRequest,
      responses: { 200: ToolResultResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 4
    submitApproval: {
      method: "POST",
      path: "/v1/runs/:id/approval",
      summary: "Answer an approval request",
      pathParams: runId,
      body: ApprovalRequest,
      responses: { 200: ApprovalResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: a run's budget raised (or set), which resumes it when its budget paused it
    raiseRunBudget: {
      method: "POST",
      path: "/v1/runs/:id/budget",
      summary: "Raise a run's budget",
      description:
        "Sets the run's `maxMicros` and/or `maxTokens` (a field left out keeps its value). A run paused at its budget resumes at once, on whichever instance drives it, when the new budget is above what it used; lower than that, it pauses at its next turn. 409 `run_finished` once the run has ended.",
      pathParams: runId,
      body: RaiseBudgetRequest,
      responses: { 200: RaiseBudgetResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: steering a run while it works
    sendRunMessage: {
      method: "POST",
      path: "/v1/runs/:id/messages",
      summary: "Add a user message to a working run (steer it)",
      description:
        "Adds a user message to a run that is `queued`, `running`, `waiting` or `paused`. An agent CLI gets it mid-turn, as if typed into it (`delivery: now`); a model run gets it before its next model call, after the turn in flight (`next_turn`). The run's events record it as `user_message` where it was delivered. 409 `run_finished` once the run has ended. Honours `Idempotency-Key`: the same key twice delivers one message. It costs nothing by itself.",
      pathParams: runId,
      body: RunMessageRequest,
      responses: { 202: RunMessageResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 5
    cancelRun: {
      method: "POST",
      path: "/v1/runs/:id/cancel",
      summary: "Cancel a run (best effort)",
      pathParams: runId,
      body: CancelRequest,
      responses: { 200: CancelResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // 6
    reportRunUsage: {
      method: "POST",
      path: "/v1/runs/:id/usage",
      summary: "Report the usage of a run the app served itself",
      description: "Accepted once per run, for runs handed back with `serve_in_app`.",
      pathParams: runId,
      body: RunUsage,
      responses: { 200: RunUsageResponse, ...errors(409), ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
    // extension: what can be asked for
    listModels: {
      method: "GET",
      path: "/v1/models",
      summary: "List models (OpenAI-compatible)",
      query: z.object({ user: z.string().max(256).optional() }),
      responses: { 200: ModelList, ...appKeyErrors, ...notBuilt },
      metadata: meta({ auth: "appKey" }),
    },
  },
  OPTIONS,
);
