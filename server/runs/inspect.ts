import type { z } from "zod";
import { MAX_INSPECTED_CONTINUATIONS, MAX_INSPECTED_PAYLOAD_BYTES, MAX_INSPECTED_TOOL_CALLS, type OwnerApproval, type OwnerRunDetail, type OwnerRunPage, type OwnerRunQuery, type OwnerToolCall } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { MachineService } from "../machines/machines.js";
import { usageOfRun } from "../ledger/usage.js";
import { keysetPage } from "../db/keyset-cursor.js";
import type { RunStore } from "./store.js";
import type { RunService } from "./runs.js";
import { runView } from "./run-view.js";

/** Events one inspection returns at most (the first ones: a run's stream is also readable by `GET /v1/runs/:id/events`). */
export const MAX_INSPECTED_EVENTS = 2000;

interface ApprovalRow {
  approval_id: string;
  kind: string;
  request: { callId?: string; requestId?: string; tool?: string };
  decision: string | null;
  decided_by: string | null;
  reason: string | null;
  created_at: Date | string;
  answered_at: Date | string | null;
}

/** What a run started by `POST /v1/responses` keeps of it (server/responses/responses.ts `ResponseRecord`), as far as the inspector shows it. */
interface StoredResponse {
  settings: { instructions: string | null; previous_response_id: string | null; store: boolean };
  input: z.infer<typeof OwnerRunDetail>["response"] extends infer R ? (R extends { input: infer I } ? I : never) : never;
  final?: { output: NonNullable<z.infer<typeof OwnerRunDetail>["response"]>["output"] };
  deleted?: boolean;
}

function responseOf(runId: string, r: StoredResponse | undefined): z.infer<typeof OwnerRunDetail>["response"] {
  if (!r) return null;
  return {
    id: `resp_${runId.slice(4)}`,
    instructions: r.deleted ? null : r.settings.instructions,
    previousResponseId: r.settings.previous_response_id,
    store: r.settings.store,
    deleted: r.deleted === true,
    input: r.input ?? [],
    output: r.deleted ? null : (r.final?.output ?? null),
  };
}

interface ToolCallRow {
  call_id: string;
  name: string;
  /** The first MAX_INSPECTED_PAYLOAD_BYTES characters of the JSON text (at least as many bytes), and the whole text's size in bytes. */
  arguments: string;
  arguments_bytes: number | string;
  result: string | null;
  result_bytes: number | string | null;
  is_error: boolean | null;
  created_at: Date | string;
  answered_at: Date | string | null;
}

/** `text` cut to at most `max` bytes of UTF-8, never inside a character. */
export function cutUtf8(text: string, max: number): { text: string; cut: boolean } {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length <= max) return { text, cut: false };
  let end = max;
  // A continuation byte (10xxxxxx) at the cut: back to the start of its character.
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return { text: bytes.subarray(0, end).toString("utf8"), cut: true };
}

function toolCallView(c: ToolCallRow): z.infer<typeof OwnerToolCall> {
  const args = cutUtf8(c.arguments, MAX_INSPECTED_PAYLOAD_BYTES);
  const answered = c.answered_at !== null;
  // An answer is stored as JSON (a `null` answer as JSON `null`), so an answered call has its text.
  const result = answered ? cutUtf8(c.result ?? "null", MAX_INSPECTED_PAYLOAD_BYTES) : null;
  const resultBytes = answered ? Number(c.result_bytes ?? 4) : null;
  return {
    callId: c.call_id,
    name: c.name,
    arguments: args.text,
    argumentsTruncated: args.cut || Number(c.arguments_bytes) > Buffer.byteLength(args.text),
    result: result?.text ?? null,
    resultBytes,
    resultTruncated: result !== null && (result.cut || resultBytes! > Buffer.byteLength(result.text)),
    isError: answered ? c.is_error === true : null,
    calledAt: new Date(c.created_at).toISOString(),
    answeredAt: answered ? new Date(c.answered_at!).toISOString() : null,
  };
}

const DECISIONS: Record<string, z.infer<typeof OwnerApproval>["decision"]> = { allow: "approved", deny: "denied", withdrawn: "withdrawn" };

/** The app owner's reads of runs: a filtered list, newest first, and one run inspected in full. */
export class RunInspector {
  constructor(
    private readonly db: Database,
    private readonly runs: RunService,
    private readonly machines: MachineService,
    private readonly store: RunStore,
  ) {}

  async list(tenant: Tenant, q: z.infer<typeof OwnerRunQuery>): Promise<z.infer<typeof OwnerRunPage>> {
    const { rows, hasMore, nextCursor } = await keysetPage(q, (after, take) =>
      this.db.prisma.run.findMany({
        where: {
          appId: tenant.appId,
          environment: tenant.environment,
          ...(q.user !== undefined ? { endUser: { externalId: q.user } } : {}),
          ...(q.status !== undefined ? { status: q.status } : {}),
          ...(q.route !== undefined ? { routeKind: q.route } : {}),
          ...(after ? { OR: [{ createdAt: { lt: after.createdAt } }, { createdAt: after.createdAt, id: { lt: after.id } }] } : {}),
        },
        include: { endUser: { select: { externalId: true } } },
        orderBy: [{ createdAt: "desc" }, { id: "desc" }],
        take,
      }),
      (r) => r.createdAt,
    );
    return { data: rows.map(runView), hasMore, nextCursor };
  }

  /** A run's events (the first MAX_INSPECTED_EVENTS): from the run bus while they are there, else from `run_events`. */
  private async events(runId: string): Promise<{ seq: number; kind: string; data: Record<string, unknown>; created_at: Date | string }[]> {
    const streamed = await this.store.streamed?.all(runId, MAX_INSPECTED_EVENTS);
    if (streamed) return streamed.map((e) => ({ seq: e.seq, kind: e.kind, data: e.data as unknown as Record<string, unknown>, created_at: e.at ?? new Date() }));
    return this.db.query(`SELECT seq, kind, data, created_at FROM run_events WHERE run_id = $1 ORDER BY seq LIMIT ${MAX_INSPECTED_EVENTS}`, [runId]);
  }

  /**
   * The runs continuing `runId`'s conversation (`previous_run_id` naming it), oldest first. Of the tenant's only: a
   * follow-up is always its previous run's app and environment, and the statement says so too.
   */
  private continuedBy(tenant: Tenant, runId: string): Promise<z.infer<typeof OwnerRunDetail>["continuedBy"]> {
    return this.db.prisma.run
      .findMany({
        where: { appId: tenant.appId, environment: tenant.environment, previousRunId: runId },
        select: { id: true, status: true, createdAt: true },
        orderBy: [{ createdAt: "asc" }, { id: "asc" }],
        take: MAX_INSPECTED_CONTINUATIONS,
      })
      .then((rows) => rows.map((r) => ({ id: r.id, status: r.status, createdAt: r.createdAt.toISOString() })));
  }

  /**
   * The run, its stored events, its approvals and who decided them, the calls of the app's tools with the app's
   * answers (each cut at MAX_INSPECTED_PAYLOAD_BYTES: an answer can be large), its ledger rows, its machine, the
   * usage reported for a handed-back run, and its conversation: the run it continues and the runs continuing it.
   */
  async get(tenant: Tenant, runId: string): Promise<z.infer<typeof OwnerRunDetail>> {
    const record = await this.runs.find(tenant, runId);
    const [events, approvals, toolCalls, ledger, machine, continuedBy] = await Promise.all([
      this.events(runId),
      this.db.query<ApprovalRow>(
        `SELECT approval_id, kind, request, decision, decided_by, reason, created_at, answered_at FROM approvals WHERE run_id = $1 ORDER BY created_at, approval_id`,
        [runId],
      ),
      // Cut in the database first (characters: at least as many bytes), so a large answer is never read whole; to bytes below.
      this.db.query<ToolCallRow>(
        `SELECT call_id, name, left(arguments::text, ${MAX_INSPECTED_PAYLOAD_BYTES}) AS arguments, octet_length(arguments::text) AS arguments_bytes,
                left(result::text, ${MAX_INSPECTED_PAYLOAD_BYTES}) AS result, octet_length(result::text) AS result_bytes, is_error, created_at, answered_at
           FROM tool_calls WHERE run_id = $1 AND app_id = $2 AND environment = $3::"Environment"
          ORDER BY created_at, call_id LIMIT ${MAX_INSPECTED_TOOL_CALLS}`,
        [runId, tenant.appId, tenant.environment],
      ),
      usageOfRun(this.db, tenant, runId),
      record.machineId ? this.machines.find(tenant, record.machineId) : Promise.resolve(null),
      this.continuedBy(tenant, runId),
    ]);
    return {
      run: runView(record),
      previousRunId: record.previousRunId,
      continuedBy,
      events: events.map((e) => ({ seq: e.seq, kind: e.kind, data: e.data, at: new Date(e.created_at).toISOString() })),
      approvals: approvals.map((a) => ({
        callId: a.request.callId ?? a.request.requestId ?? a.approval_id,
        tool: a.request.tool ?? a.kind,
        decision: a.decision === null ? null : (DECISIONS[a.decision] ?? null),
        decidedBy: a.decided_by,
        reason: a.reason,
        askedAt: new Date(a.created_at).toISOString(),
        decidedAt: a.answered_at === null ? null : new Date(a.answered_at).toISOString(),
      })),
      toolCalls: toolCalls.map(toolCallView),
      ledger,
      machine,
      reportedUsage:
        record.status === "handed_back" && record.usageReportedAt
          ? { inputTokens: Number(record.inputTokens), outputTokens: Number(record.outputTokens), reportedAt: record.usageReportedAt.toISOString() }
          : null,
      response: record.source === "responses" ? responseOf(record.id, (record.request as { responses?: StoredResponse }).responses) : null,
    };
  }
}
