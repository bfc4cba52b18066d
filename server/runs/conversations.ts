import { randomUUID } from "node:crypto";
import type { ChatMessage, CreateRunRequest, OnSessionLost, RouteKind, RunRoute, RunSource, RunStatus } from "@svc/contract";
import type { Sql } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { ACTIVE_STATUSES, STORED_CONVERSATION_SQL, type RunRow } from "./run-rows.js";

/**
 * Conversations: a follow-up run continues an ended run (`previousRunId`). On a model
 * runtime its conversation lives in the service (the previous run's stored messages go
 * first, to whichever runtime routing picks); on an agent CLI it lives on the end user's
 * machine (the CLI's own session, resumed there, never sent to the service). This module
 * reads what a follow-up continues and decides where it may go.
 */

/** At most this many runs back are read to make a conversation's history (a chain longer than that starts at its 50th run back). */
const MAX_CHAIN = 50;

/** The run a follow-up continues, as far as the follow-up needs it. */
export interface PreviousRun {
  id: string;
  status: RunStatus;
  source: RunSource;
  model: string;
  request: RunRow["request"];
  route_kind: RunRoute | null;
  machine_id: string | null;
  runtime_name: string | null;
  end_user_id: string;
  /** The machine's name as its user knows it (for a refusal), and whether it was removed since. */
  hostname: string | null;
  machine_revoked: boolean | null;
}

/** The conversation a follow-up continues: on an agent CLI, its session on the machine to resume. */
export interface FollowUp {
  previous: PreviousRun;
  /** The session of an agent CLI run (its machine and runtime): a follow-up is routed there only, to resume it. */
  session: { id: string; machineId: string; runtime: string; routeKind: Exclude<RouteKind, "app">; asked: string } | null;
  onSessionLost: OnSessionLost;
}

/**
 * The run `previousRunId` names, if it may be continued by this request: the same app,
 * environment and user (anything else is the same 404 as an unknown run), ended (an active
 * one is 409 `run_active`, saying its state), and one whose conversation the service holds
 * (a run handed back to the app, a chat completion or a response is the caller's own: 409).
 */
export async function followUpOf(sql: Sql, tenant: Tenant, body: Pick<CreateRunRequest, "user" | "previousRunId" | "onSessionLost">): Promise<FollowUp | null> {
  const id = body.previousRunId;
  if (!id) return null;
  const [prev] = await sql.query<PreviousRun & { external_id: string }>(
    `SELECT r.id, r.status::text AS status, r.source, r.model, r.request, r.route_kind, r.machine_id, r.runtime_name, r.end_user_id, u.external_id, m.hostname, m.revoked_at IS NOT NULL AS machine_revoked
       FROM runs r JOIN end_users u ON u.id = r.end_user_id LEFT JOIN machines m ON m.id = r.machine_id
      WHERE r.id = $1 AND r.app_id = $2 AND r.environment = $3::"Environment"`,
    [id, tenant.appId, tenant.environment],
  );
  if (!prev || prev.external_id !== body.user) throw new ApiError("not_found", `No run ${id} for user ${body.user}.`, { param: "previousRunId" });
  if ((ACTIVE_STATUSES as readonly string[]).includes(prev.status)) {
    throw new ApiError("run_active", `Run ${id} is still ${prev.status}: a follow-up continues an ended run. Wait for its end (its events end with run_completed, run_failed or run_cancelled), or add to it while it works with POST /v1/runs/${id}/messages.`, { param: "previousRunId" });
  }
  if (prev.status === "handed_back") {
    throw new ApiError("conversation_unavailable", `Run ${id} was handed back to the app (serve_in_app): the app answered it, so the service holds no conversation of it to continue. Start a run with the history in \`prompt\`.`, { param: "previousRunId" });
  }
  if (prev.source !== "runs") {
    const how = prev.source === "responses" ? "continue a response with previous_response_id on POST /v1/responses" : "a chat completion's conversation is the messages its caller sends";
    throw new ApiError("conversation_unavailable", `Run ${id} is a ${prev.source === "chat" ? "chat completion" : "response"}, whose conversation its caller holds: ${how}.`, { param: "previousRunId" });
  }
  const session = prev.request.session && prev.machine_id && prev.runtime_name && prev.route_kind && prev.route_kind !== "app" && prev.route_kind !== "service"
    ? { id: prev.request.session.id, machineId: prev.machine_id, runtime: prev.runtime_name, routeKind: prev.route_kind, asked: askedOn(prev.runtime_name, prev.model) }
    : null;
  return { previous: prev, session, onSessionLost: body.onSessionLost ?? "refuse" };
}

/** What to ask routing for to land on the same runtime with the same model (an agent CLI's own default: its name). */
function askedOn(runtime: string, model: string): string {
  return model === "auto" || model === runtime ? runtime : `${runtime}/${model}`;
}

/** A new session of an agent CLI (its id is the CLI's own for Claude Code, the worker's name for it for Codex). */
export const newSession = (): { id: string; resume: boolean } => ({ id: randomUUID(), resume: false });

/**
 * The conversation up to and including `runId`, as chat messages without its system prompt:
 * a model run's stored messages (which hold its own history already), or, for an agent CLI
 * run (whose conversation lives on the machine), its prompt, the messages it was sent while it
 * worked, and its output, after the history of the run it continued.
 */
export async function historyOf(sql: Sql, runId: string): Promise<ChatMessage[]> {
  const rows = await sql.query<{ id: string; depth: number; prompt: string; output: string | null; conversation: ChatMessage[] | null; steering: string[] | null }>(
    `WITH RECURSIVE chain AS (
       SELECT id, previous_run_id, 0 AS depth FROM runs WHERE id = $1
       UNION ALL
       SELECT r.id, r.previous_run_id, c.depth + 1 FROM runs r JOIN chain c ON r.id = c.previous_run_id WHERE c.depth < ${MAX_CHAIN})
     SELECT c.id, c.depth, runs.request->>'prompt' AS prompt, runs.output,
            ${STORED_CONVERSATION_SQL} AS conversation,
            (SELECT jsonb_agg(m.content ORDER BY m.delivered_seq) FROM run_user_messages m WHERE m.run_id = runs.id AND m.delivered_seq IS NOT NULL) AS steering
       FROM chain c JOIN runs ON runs.id = c.id ORDER BY c.depth`,
    [runId],
  );
  // Newest first: the first with a stored conversation holds everything before it.
  const parts: ChatMessage[][] = [];
  for (const r of rows) {
    if (r.conversation?.length) {
      parts.push(r.conversation.filter((m) => m.role !== "system" && m.role !== "developer"));
      break;
    }
    parts.push([
      { role: "user", content: r.prompt },
      ...(r.steering ?? []).map((content): ChatMessage => ({ role: "user", content })),
      ...(r.output ? [{ role: "assistant" as const, content: r.output }] : []),
    ]);
  }
  return parts.reverse().flat();
}

/** A history told to an agent CLI starting a fresh session: the earlier turns as text, then the new prompt. */
export function contextPrompt(history: ChatMessage[], prompt: string): string {
  if (!history.length) return prompt;
  const text = (m: ChatMessage) => (typeof m.content === "string" ? m.content : Array.isArray(m.content) ? m.content.map((p) => ("text" in p && typeof p.text === "string" ? p.text : "")).join("") : "");
  const lines = history.flatMap((m) => {
    if (m.role === "user") return [`User: ${text(m)}`];
    if (m.role === "assistant") {
      const calls = (m.tool_calls ?? []).map((c) => `(called ${c.function.name} with ${c.function.arguments})`);
      return [`Assistant: ${[text(m), ...calls].filter(Boolean).join(" ")}`];
    }
    if (m.role === "tool") return [`Tool result: ${text(m)}`];
    return [];
  });
  return `This conversation began earlier in another session, which could not be continued. What was said so far:\n\n${lines.join("\n\n")}\n\nThe user now says:\n\n${prompt}`;
}
