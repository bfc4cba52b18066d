import { newIdempotencyKey, seg, type Transport } from "./client.js";
import { SvcError } from "./errors.js";
import { isTransient, retryDelayMs, sleep } from "./http.js";
import type { ApprovalAnswer, ApprovalHandler, RunEventOf, RunTool } from "./types.js";

/** Posts one answer to the run: the same idempotency key on every try (the service also refuses a second answer with 409). */
function postAnswer(a: Answerer, what: "tool_result" | "approval", body: unknown, key: string): Promise<unknown> {
  return a.api.request({ method: "POST", path: `/runs/${seg(a.runId)}/${what}`, body, retry: "idempotent", options: { signal: a.signal, idempotencyKey: key } });
}

/** What answering a run's calls needs. */
export interface Answerer {
  api: Transport;
  runId: string;
  user?: string;
  tools: Map<string, RunTool>;
  onApproval?: ApprovalHandler;
  /** Aborts when the driver stops: an answer nobody reads any more is not posted. */
  signal: AbortSignal;
  /** Tries for a post that got no answer (answers are safe to repeat: the service refuses a second one). */
  retries: number;
}

/**
 * Runs the tool the call names and posts its result: the return value, or
 * `{ error }` with `isError` when it threw, when it has no `run`, or when no
 * tool has that name (the model is told, rather than the run waiting for a
 * result that never comes).
 */
export async function answerToolCall(a: Answerer, call: RunEventOf<"tool_call">): Promise<void> {
  const tool = a.tools.get(call.name);
  let result: unknown;
  let isError = false;
  try {
    if (!tool) throw new Error(`The app has no tool named "${call.name}".`);
    if (!tool.run) throw new Error(`The app's tool "${call.name}" has no run function.`);
    result = (await tool.run(call.arguments, { runId: a.runId, callId: call.callId, signal: a.signal })) ?? null;
    JSON.stringify(result); // a result that cannot be sent is the tool's error, not a lost connection
  } catch (err) {
    result = { error: err instanceof Error ? err.message : String(err) };
    isError = true;
  }
  const key = newIdempotencyKey();
  await post(a, () => postAnswer(a, "tool_result", { callId: call.callId, user: a.user, result, ...(isError ? { isError } : {}) }, key));
}

/** Asks `onApproval` and posts its decision. No handler, or a handler that throws, denies: a run never proceeds on a guess. */
export async function answerApproval(a: Answerer, req: RunEventOf<"approval_request">): Promise<void> {
  let answer: ApprovalAnswer;
  try {
    answer = a.onApproval
      ? await a.onApproval({
          approvalId: req.approvalId,
          what: req.what,
          tool: req.tool,
          ...(req.callId !== undefined ? { callId: req.callId } : {}),
          arguments: req.arguments,
          ...(req.description !== undefined ? { description: req.description } : {}),
          runId: a.runId,
        })
      : { decision: "deny", reason: "the app has no approval handler" };
  } catch (err) {
    answer = { decision: "deny", reason: err instanceof Error ? err.message : String(err) };
  }
  const allow = answer === true || (typeof answer === "object" && answer !== null && answer.decision === "allow");
  const reason = typeof answer === "object" && answer !== null && typeof answer.reason === "string" ? answer.reason.slice(0, 4096) : undefined;
  const key = newIdempotencyKey();
  await post(a, () => postAnswer(a, "approval", { approvalId: req.approvalId, user: a.user, decision: allow ? "allow" : "deny", ...(reason !== undefined ? { reason } : {}) }, key));
}

/**
 * Posts an answer, again after a passing failure. A 409 `already_answered` (a
 * call answered before a reconnect) or `run_finished` (the run ended meanwhile)
 * means there is nothing left to answer; any other error is the caller's.
 */
async function post(a: Answerer, send: () => Promise<unknown>): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    if (a.signal.aborted) return;
    try {
      await send();
      return;
    } catch (err) {
      if (err instanceof SvcError && (err.code === "already_answered" || err.code === "run_finished")) return;
      if (a.signal.aborted) return;
      if (!isTransient(err) || attempt >= a.retries) throw err;
      await sleep(backoffMs(attempt, err), a.signal).catch(() => {});
    }
  }
}

/** 200 ms, doubling, at most 5 s, with jitter; never sooner than the answer's `Retry-After` (a 429 or 503). */
export function backoffMs(attempt: number, err?: unknown): number {
  const asked = retryDelayMs(attempt, err);
  const exp = Math.min(200 * 2 ** attempt, 5_000);
  return err instanceof SvcError && err.retryAfterMs ? asked : exp / 2 + Math.random() * (exp / 2);
}
