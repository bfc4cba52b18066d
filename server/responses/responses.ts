import type { Readable } from "node:stream";
import type { Response } from "express";
import type { z } from "zod";
import { isFinalRunEvent, type ChatMessage, type CreateResponseRequest, type ResponseInputItemList, type ResponseInputItemsQuery, type ResponseObject, type ResponseOutputItem } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import type { RunService } from "../runs/runs.js";
import type { ChatParams } from "../runs/chat-turn.js";
import type { RunBus } from "../runs/bus.js";
import type { RunStore } from "../runs/store.js";
import type { StoredEvent } from "../runs/run-rows.js";
import { EventStreamWriter, SLOW_READER_COMMENT } from "../runs/sse.js";
import { ModelTurnEndpoint } from "../runs/model-turn-endpoint.js";
import { ECHO_MODEL } from "../runs/echo-script.js";
import { functionTools, hasImage, inputItems, toChatMessages, toChatTools, type StoredItem } from "./input.js";
import { DONE_FRAME, frame, ResponseAssembler, responseIdOf, responseObject, suffixOf, type ResponseHead, type ResponseSettings } from "./assemble.js";
import { EchoResponder } from "./echo.js";

type Request = CreateResponseRequest;

/** How long a stored response is kept for `previous_response_id` and reads (OpenAI keeps them 30 days). */
export const DEFAULT_RESPONSE_RETENTION_DAYS = 30;

/** What a run started by `POST /v1/responses` keeps of it, in `runs.request.responses`. */
export interface ResponseRecord {
  settings: ResponseSettings;
  /** The request's own input items (empty when not stored, or once deleted). */
  input: StoredItem[];
  /** The whole conversation the model saw, as items (previous response's, this input, this output): what `previous_response_id` continues. */
  history: StoredItem[];
  /** Set when the answer is known at creation (`svc/echo`): the response as it ended. */
  final?: ResponseObject;
  deleted?: boolean;
}

interface StoredRow {
  id: string;
  end_user_id: string;
  external_id: string;
  model: string;
  status: string;
  created_at: Date;
  finished_at: Date | null;
  record: ResponseRecord | null;
}

const RESPONSE_ID = /^resp_([a-z0-9]{24})$/;

/**
 * `POST /v1/responses` and the stored responses. A response is a run of one
 * model turn (source `responses`), routed, counted and driven like a chat
 * completion; its events become the specification's. What a stored response
 * keeps (its settings, input and the conversation so far) is kept with its run,
 * written in the statement that starts it: nothing more on the way to the first
 * token. Its id is its run's (`resp_X` is `run_X`).
 */
export class ResponsesService extends ModelTurnEndpoint {
  private readonly echo: EchoResponder;

  constructor(db: Database, clock: Clock, runs: RunService, store: RunStore, bus: RunBus, log: Logger, private readonly retentionDays: number = DEFAULT_RESPONSE_RETENTION_DAYS) {
    super(db, clock, runs, store, bus, log);
    this.echo = new EchoResponder(db, clock, () => runs.ended("completed", null));
  }

  /** Now on the service's clock, in epoch seconds (a response's times). */
  private readonly seconds = () => Math.floor(this.clock.now().getTime() / 1000);

  async create(tenant: Tenant, request: Request, res: Response, replayRunId?: string): Promise<ResponseObject | Readable> {
    const user = request.user ?? request.safety_identifier;
    if (user === undefined) throw new ApiError("invalid_request", "Invalid body field `user`: the end user the response is for is required here (`user`, or `safety_identifier`).", { param: "user" });
    this.purgeExpired();
    if (request.background) throw new ApiError("invalid_request", "Invalid body field `background`: background responses are not supported here; stream the response (`stream: true`) or wait for it.", { param: "background" });
    if (request.metadata && Object.keys(request.metadata).length > 16) throw new ApiError("invalid_request", "Invalid body field `metadata`: at most 16 pairs.", { param: "metadata" });
    const tools = functionTools(request.tools);
    const items = await this.resolveReferences(tenant, user, inputItems(request.input, randomId("", 16)));
    const previous = request.previous_response_id ? await this.continued(tenant, request.previous_response_id, user) : [];
    const echo = request.model === ECHO_MODEL;
    const format = request.text?.format;
    if (echo && format && format.type !== "text") throw new ApiError("invalid_request", `Invalid body field \`text.format\`: ${ECHO_MODEL} answers text only (\`${format.type}\` needs a model runtime that takes a JSON schema).`, { param: "text.format" });
    if (echo && hasImage(items)) throw new ApiError("invalid_request", `${ECHO_MODEL} takes no images: send the \`input_image\` to a model runtime that does, or text only.`, { param: "input" });
    const settings: ResponseSettings = {
      instructions: request.instructions ?? null,
      max_output_tokens: request.max_output_tokens ?? null,
      parallel_tool_calls: request.parallel_tool_calls ?? true,
      previous_response_id: request.previous_response_id ?? null,
      reasoning: { effort: request.reasoning?.effort ?? null, summary: request.reasoning?.summary ?? null },
      store: request.store ?? true,
      temperature: request.temperature ?? 1,
      text: { format: format ? { ...format } : { type: "text" }, ...(request.text?.verbosity ? { verbosity: request.text.verbosity } : {}) },
      tool_choice: request.tool_choice ?? "auto",
      tools,
      top_p: request.top_p ?? 1,
      truncation: request.truncation ?? "disabled",
      user: request.user ?? null,
      safety_identifier: request.safety_identifier ?? null,
      prompt_cache_key: request.prompt_cache_key ?? null,
      metadata: request.metadata ?? {},
    };
    const history = [...previous, ...items];
    const record: ResponseRecord = { settings, input: settings.store ? items : [], history: settings.store ? history : [] };
    const instructions: ChatMessage[] = settings.instructions ? [{ role: "system", content: settings.instructions }] : [];
    const messages = [...instructions, ...toChatMessages(history)];
    if (!messages.some((m) => m.role === "user" || m.role === "tool")) throw new ApiError("invalid_request", "Invalid body field `input`: it has no user message or function call output to answer.", { param: "input" });
    if (echo) return this.echo.respond(tenant, user, history, record, request.stream === true, res, replayRunId);

    const chat: ChatParams = {
      messages,
      tools: tools.length && request.tool_choice !== "none" ? toChatTools(tools) : undefined,
      maxTokens: request.max_output_tokens ?? undefined,
      temperature: request.temperature ?? undefined,
      topP: request.top_p ?? undefined,
      responseFormat: chatFormat(format),
      reasoningEffort: request.reasoning?.effort ?? undefined,
      ...(tools.length ? { toolChoice: chatToolChoice(request.tool_choice), parallelToolCalls: request.parallel_tool_calls ?? undefined } : {}),
    };
    const started = await this.beginTurn(tenant, res, { user, model: request.model, source: "responses", request: { prompt: "", chat, model: request.model, responses: record }, replayRunId }, "response");
    const head: ResponseHead = { id: responseIdOf(started.runId), suffix: suffixOf(started.runId), created_at: Math.floor(started.createdAt.getTime() / 1000), model: started.model, settings };
    const readFirst = !started.drivenHere;
    if (request.stream) {
      const stream = new EventStreamWriter(res);
      const assembler = new ResponseAssembler(head, (e) => stream.write(frame(e)), this.seconds);
      assembler.open();
      const end = (why: string) => {
        if (why === "slow_reader") {
          assembler.streamError("slow_reader", `The stream was closed: its reader fell more than 1 MiB behind. The response goes on; read it with GET /v1/responses/${head.id}.`);
          return stream.end(SLOW_READER_COMMENT);
        }
        if (assembler.final) stream.write(DONE_FRAME);
        stream.end();
      };
      const stop = this.follow(started.runId, (e) => assembler.event(e), end, readFirst, stream);
      res.on("close", stop);
      return stream.out;
    }
    const assembler = new ResponseAssembler(head, () => {}, this.seconds);
    return new Promise((resolve) => {
      const stop = this.follow(started.runId, (e: StoredEvent) => assembler.event(e), () => resolve(assembler.final ?? responseObject(head, { status: "failed", error: { type: "server_error", code: "server_error", message: "The answer stopped before it ended." } })), readFirst);
      res.on("close", stop);
    });
  }

  /** `GET /v1/responses/{id}`: the stored response as it stands (in progress, or as it ended). */
  async retrieve(tenant: Tenant, id: string, user: string | undefined): Promise<ResponseObject> {
    const row = await this.stored(tenant, id, user);
    return this.materialize(row);
  }

  /** `DELETE /v1/responses/{id}`: its input and output go; its run record and ledger rows stay. */
  async remove(tenant: Tenant, id: string, user: string | undefined): Promise<{ id: string; object: "response.deleted"; deleted: true }> {
    const row = await this.stored(tenant, id, user);
    if (!row.finished_at && !row.record!.final) throw new ApiError("response_in_progress", `Response ${id} is still in progress: delete it once it has ended (or cancel its run, POST /v1/runs/run_${suffixOf(row.id)}/cancel).`);
    await this.empty([row.id]);
    return { id, object: "response.deleted", deleted: true };
  }

  /**
   * What responses kept (their input, the conversation, their output, their events' text)
   * goes; their run records and ledger rows stay: they are the usage.
   */
  private async empty(runIds: string[]): Promise<void> {
    await this.db.query(
      `UPDATE runs SET request = jsonb_set(request - 'chat', '{responses}', jsonb_build_object('deleted', true, 'settings', (request->'responses'->'settings') || '{"instructions": null, "metadata": {}}'::jsonb, 'input', '[]'::jsonb, 'history', '[]'::jsonb)), output = NULL, transcript = NULL
        WHERE id = ANY($1::text[])`,
      [runIds],
    );
    // Their events stay (a re-attach still ends), emptied: on the run bus, moved to Postgres first (a finished run's are, moments after its end).
    const streamed = this.store.streamed;
    if (streamed) for (const id of runIds) await streamed.compact(id);
    await this.db.query(
      `UPDATE run_events SET data = CASE WHEN kind = 'text_delta' THEN jsonb_set(data, '{text}', '""') ELSE (data - 'toolCalls') || jsonb_build_object('output', '') END
        WHERE run_id = ANY($1::text[]) AND kind IN ('text_delta', 'run_completed', 'run_cancelled', 'run_failed')`,
      [runIds],
    );
  }

  private lastPurge = 0;

  /**
   * Stored responses past the retention are emptied as a DELETE empties them, a batch of
   * at most 500 at a time, at most once an hour per instance (started by a create; reads
   * refuse them from the moment they pass it).
   */
  private purgeExpired(): void {
    const now = this.clock.now().getTime();
    if (now - this.lastPurge < 3_600_000) return;
    this.lastPurge = now;
    this.purge(new Date(now - this.retentionDays * 86_400_000)).catch((err) => this.log.warn({ err }, "emptying expired responses failed"));
  }

  /** Empties up to 500 finished responses created before `before`; how many. */
  async purge(before: Date): Promise<number> {
    const rows = await this.db.query<{ id: string }>(
      `SELECT id FROM runs WHERE source = 'responses' AND created_at < $1 AND status NOT IN ('queued', 'running', 'waiting', 'paused')
          AND request ? 'responses' AND NOT COALESCE((request->'responses'->>'deleted')::boolean, false) LIMIT 500`,
      [before],
    );
    if (rows.length) await this.empty(rows.map((r) => r.id));
    return rows.length;
  }

  /** `GET /v1/responses/{id}/input_items`: the request's input items, a page at a time (newest first unless `order=asc`). */
  async inputItems(tenant: Tenant, id: string, query: z.infer<typeof ResponseInputItemsQuery>): Promise<z.infer<typeof ResponseInputItemList>> {
    const row = await this.stored(tenant, id, query.user);
    let items = [...(row.record!.input ?? [])];
    if ((query.order ?? "desc") === "desc") items.reverse();
    const at = (cursor: string, param: string) => {
      const i = items.findIndex((item) => item.id === cursor);
      if (i < 0) throw new ApiError("invalid_request", `Invalid query parameter \`${param}\`: ${JSON.stringify(cursor)} is not an input item of response ${id}.`, { param });
      return i;
    };
    if (query.after) items = items.slice(at(query.after, "after") + 1);
    if (query.before) items = items.slice(0, at(query.before, "before"));
    const limit = query.limit ?? 20;
    const data = items.slice(0, limit);
    return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: items.length > limit };
  }

  /**
   * `item_reference` items replaced by the items they name: an output item of a
   * stored response of the same user (`msg_X`, `fc_X_n`: `X` is the response's),
   * or an item of the conversation it continued. Anything else is the same 404.
   */
  private async resolveReferences(tenant: Tenant, user: string, items: StoredItem[]): Promise<StoredItem[]> {
    if (!items.some((i) => i.type === "item_reference")) return items;
    const seen = new Map<string, StoredItem[]>();
    const out: StoredItem[] = [];
    for (const [n, item] of items.entries()) {
      if (item.type !== "item_reference") {
        out.push(item);
        continue;
      }
      const param = `input[${n}].id`;
      const suffix = /^(?:msg|fc|rs)_([a-z0-9]{24})(?:_\d+)?$/.exec(item.id)?.[1];
      const unknown = () => new ApiError("not_found", `No item ${JSON.stringify(item.id)} (${param}) in a stored response of user ${user}: send the item itself, or continue with \`previous_response_id\`.`, { param });
      if (!suffix) throw unknown();
      if (!seen.has(suffix)) {
        const row = await this.stored(tenant, `resp_${suffix}`, user, param).catch(() => null);
        seen.set(suffix, row ? [...row.record!.history, ...((await this.materialize(row)).output as StoredItem[])] : []);
      }
      const found = seen.get(suffix)!.find((i) => i.id === item.id);
      if (!found) throw unknown();
      out.push(found);
    }
    return out;
  }

  /** The conversation a `previous_response_id` continues: the items it saw and its output. */
  private async continued(tenant: Tenant, id: string, user: string): Promise<StoredItem[]> {
    const row = await this.stored(tenant, id, user, "previous_response_id");
    const response = await this.materialize(row);
    if (response.status === "in_progress") throw new ApiError("response_in_progress", `Response ${id} (previous_response_id) is still in progress: continue it once it has ended.`, { param: "previous_response_id" });
    return [...row.record!.history, ...(response.output as StoredItem[])];
  }

  /** A stored response of this tenant (and user, when named), within the retention: anything else is the same 404. */
  private async stored(tenant: Tenant, id: string, user: string | undefined, param?: string): Promise<StoredRow> {
    const runId = RESPONSE_ID.exec(id)?.[1];
    const since = new Date(this.clock.now().getTime() - this.retentionDays * 86_400_000);
    const [row] = runId
      ? await this.db.query<StoredRow>(
          `SELECT r.id, r.end_user_id, u.external_id, r.model, r.status::text AS status, r.created_at, r.finished_at, r.request->'responses' AS record
             FROM runs r JOIN end_users u ON u.id = r.end_user_id AND u.app_id = r.app_id AND u.environment = r.environment
            WHERE r.id = $1 AND r.app_id = $2 AND r.environment = $3::"Environment" AND r.source = 'responses' AND r.created_at >= $4`,
          [`run_${runId}`, tenant.appId, tenant.environment, since],
        )
      : [];
    const found = row && row.record && row.record.settings.store && !row.record.deleted && (user === undefined || row.external_id === user);
    if (!found) {
      const where = param ? ` (${param})` : "";
      throw new ApiError("not_found", `No response ${JSON.stringify(id)}${where}${user !== undefined ? ` for user ${user}` : ""}: it does not exist, was not stored (\`store: false\`), was deleted, or is older than the ${this.retentionDays} days responses are kept.`, param ? { param } : {});
    }
    return row;
  }

  /** A stored response as it stands: as it ended (its run's final event), or in progress with what it said so far. */
  private async materialize(row: StoredRow): Promise<ResponseObject> {
    const record = row.record!;
    if (record.final) return record.final;
    const head: ResponseHead = { id: responseIdOf(row.id), suffix: suffixOf(row.id), created_at: Math.floor(new Date(row.created_at).getTime() / 1000), model: row.model, settings: record.settings };
    const ended = row.finished_at ? Math.floor(new Date(row.finished_at).getTime() / 1000) : this.seconds();
    const assembler = new ResponseAssembler(head, () => {}, () => ended);
    const { active, last } = await this.store.runEnd(row.id);
    const end = !active && last && isFinalRunEvent(last.kind) ? last : null;
    // An ended run's final event carries what it said (but a failure's): only then are its stored deltas not read.
    const said = end && (end.data.kind === "run_completed" || end.data.kind === "run_cancelled") && end.data.output;
    const text = said ? "" : await this.store.streamedText(row.id);
    if (text) assembler.event({ seq: 0, kind: "text_delta", data: { kind: "text_delta", turn: 1, text } });
    if (end) assembler.event(end);
    if (assembler.final) return assembler.final;
    const output: ResponseOutputItem[] = text ? [{ type: "message", id: `msg_${head.suffix}`, status: "in_progress", role: "assistant", content: [{ type: "output_text", text, annotations: [], logprobs: [] }] }] : [];
    return responseObject(head, { status: "in_progress", output });
  }
}

/** `tool_choice` as the chat-completions one (`auto` is the runtime's default and `none` offers no tools: neither is sent). */
function chatToolChoice(choice: Request["tool_choice"]): ChatParams["toolChoice"] {
  if (choice === "required") return "required";
  if (choice && typeof choice === "object") return { type: "function", function: { name: choice.name } };
  return undefined;
}

/** `text.format` as the chat-completions `response_format` a model runtime takes. */
function chatFormat(format: NonNullable<Request["text"]>["format"]): Record<string, unknown> | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  if (!format.schema) throw new ApiError("invalid_request", "Invalid body field `text.format.schema`: a `json_schema` format needs its schema.", { param: "text.format.schema" });
  return { type: "json_schema", json_schema: { name: format.name ?? "response", schema: format.schema, ...(format.strict != null ? { strict: format.strict } : {}), ...(format.description ? { description: format.description } : {}) } };
}
