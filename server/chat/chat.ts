import type { Readable } from "node:stream";
import type { Response } from "express";
import type { z } from "zod";
import type { ChatCompletion, ChatCompletionRequest, ModelList } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { costClassOf, periodOf } from "../ledger/metering.js";
import { recordEchoes, type EchoRecord } from "../ledger/echo.js";
import { ensureEndUser } from "../users/end-users.js";
import { reachableRuntimes } from "../runs/routing.js";
import type { RunService } from "../runs/runs.js";
import type { ChatParams } from "../runs/chat-turn.js";
import type { RunBus } from "../runs/bus.js";
import type { RunStore } from "../runs/store.js";
import type { StoredEvent } from "../runs/run-rows.js";
import { EventStreamWriter, SLOW_READER_COMMENT } from "../runs/sse.js";
import { ModelTurnEndpoint } from "../runs/model-turn-endpoint.js";
import { ChunkWriter, CompletionBuilder, type CompletionHead } from "./completions.js";
import { GroupCommit } from "../db/group-commit.js";
import { countWords, ECHO_MODEL } from "../runs/echo-script.js";

type Request = z.infer<typeof ChatCompletionRequest>;

export { ECHO_MODEL } from "../runs/echo-script.js";

/**
 * The chat-completions endpoint. `svc/echo` is answered here; anything else is
 * a one-turn run on a model runtime of the user's own machine (never a
 * subscription CLI), routed, counted and driven like any run, its events turned
 * into the chat-completions shapes as they come.
 */
export class ChatService extends ModelTurnEndpoint {
  private readonly echoRecords: GroupCommit<EchoRecord>;

  constructor(db: Database, clock: Clock, runs: RunService, store: RunStore, bus: RunBus, log: Logger) {
    super(db, clock, runs, store, bus, log);
    this.echoRecords = new GroupCommit((records) => recordEchoes(this.db, records));
  }

  async complete(tenant: Tenant, request: Request, res: Response, replayRunId?: string): Promise<z.infer<typeof ChatCompletion> | Readable> {
    // The end user: `user`, else OpenAI's `safety_identifier` (which replaces the deprecated `user`); `user` wins when both are sent.
    const user = request.user ?? request.safety_identifier;
    if (user === undefined) throw new ApiError("invalid_request", "Invalid body field `user`: the end user the completion is for is required here (`user`, or `safety_identifier`).", { param: "user" });
    const body = { ...request, user };
    if (body.model === ECHO_MODEL) return this.echo(tenant, body, res, replayRunId);
    const chat: ChatParams = {
      messages: body.messages,
      tools: body.tools,
      maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
      temperature: body.temperature ?? undefined,
    };
    const started = await this.beginTurn(tenant, res, { user: body.user, model: body.model, source: "chat", request: { prompt: "", chat, model: body.model }, replayRunId }, "completion");
    const head: CompletionHead = { id: `chatcmpl-${started.runId.slice(4)}`, created: Math.floor(started.createdAt.getTime() / 1000), model: started.model };
    if (body.stream) return this.streamed(started.runId, head, body.stream_options?.include_usage === true, res, !started.drivenHere);
    return this.gathered(started.runId, head, res, !started.drivenHere);
  }

  /** What can be asked for: the service's own model, `auto`, and the models the user's machines serve now. */
  async models(tenant: Tenant, user: string | undefined): Promise<z.infer<typeof ModelList>> {
    const created = Math.floor(this.clock.now().getTime() / 1000);
    const data = [
      { id: ECHO_MODEL, object: "model" as const, created, owned_by: "svc" },
      { id: "auto", object: "model" as const, created, owned_by: "svc" },
    ];
    const [endUser] = user
      ? await this.db.query<{ id: string }>(`SELECT id FROM end_users WHERE app_id = $1 AND environment = $2::"Environment" AND external_id = $3`, [tenant.appId, tenant.environment, user])
      : [];
    if (endUser) {
      // The same runtimes routing would consider; chat completions reach model runtimes only.
      const runtimes = (await reachableRuntimes(this.db, this.clock, tenant, endUser.id)).filter((r) => r.kind === "model").sort((a, b) => a.runtime.localeCompare(b.runtime));
      const ids = new Map<string, string>();
      for (const r of runtimes) for (const m of r.models) if (!ids.has(`${r.runtime}/${m}`)) ids.set(`${r.runtime}/${m}`, r.runtime);
      for (const [id, runtime] of ids) data.push({ id, object: "model", created, owned_by: runtime });
    }
    return { object: "list", data };
  }

  private streamed(runId: string, head: CompletionHead, includeUsage: boolean, res: Response, readFirst: boolean): Readable {
    const stream = new EventStreamWriter(res);
    const writer = new ChunkWriter(head, includeUsage, (frame) => stream.write(frame), res.req.id);
    writer.open();
    const end = (why: string) => stream.end(why === "slow_reader" ? SLOW_READER_COMMENT : undefined);
    const stop = this.follow(runId, (e) => writer.event(e), end, readFirst, stream);
    res.on("close", stop);
    return stream.out;
  }

  private gathered(runId: string, head: CompletionHead, res: Response, readFirst: boolean): Promise<z.infer<typeof ChatCompletion>> {
    const builder = new CompletionBuilder(head);
    return new Promise((resolve, reject) => {
      const stop = this.follow(runId, (e: StoredEvent) => builder.event(e), () => {
        const r = builder.result;
        if (r && "completion" in r) resolve(r.completion);
        else reject(new ApiError("service_unavailable", `The user's runtime could not answer: ${r?.error.message ?? "the answer stopped"}.`));
      }, readFirst);
      res.on("close", stop);
    });
  }

  private async echoCreatedAt(tenant: Tenant, runId: string): Promise<Date> {
    const [run] = await this.db.query<{ created_at: Date }>(`SELECT created_at FROM runs WHERE id = $1 AND app_id = $2 AND environment = $3::"Environment"`, [runId, tenant.appId, tenant.environment]);
    if (!run) throw new ApiError("not_found", "The run this Idempotency-Key started is gone.");
    return new Date(run.created_at);
  }

  /**
   * `svc/echo`: the last user message, back. It checks the key, the base URL and
   * `user`; it reaches no machine and bills nothing, but leaves its run record and
   * a ledger row (cost class `free`, kind `echo`, counted against no allowance).
   */
  private async echo(tenant: Tenant, body: Request & { user: string }, res: Response, replayRunId?: string): Promise<z.infer<typeof ChatCompletion> | Readable> {
    // A repeat (same Idempotency-Key) is the first answer again: its run's time, not now.
    const now = replayRunId ? await this.echoCreatedAt(tenant, replayRunId) : this.clock.now();
    const runId = replayRunId ?? randomId("run_", 24);
    const lastUser = [...body.messages].reverse().find((m) => m.role === "user");
    const text = typeof lastUser?.content === "string" ? lastUser.content : (lastUser?.content ?? []).map((p) => (p as { text?: string }).text ?? "").join("");
    const usage = { inputTokens: countWords(body.messages.map((m) => (typeof m.content === "string" ? m.content : "")).join(" ")), outputTokens: countWords(text) };
    const endUserId = await ensureEndUser(this.db, tenant, body.user);
    // A repeat (same Idempotency-Key) is answered again, not recorded again.
    if (!replayRunId) {
      await this.echoRecords.add({
        id: runId,
        app_id: tenant.appId,
        environment: tenant.environment,
        end_user_id: endUserId,
        output: text,
        input_tokens: usage.inputTokens,
        output_tokens: usage.outputTokens,
        created_at: now.toISOString(),
        period: periodOf(now),
      });
      this.runs.ended("completed", null);
    }
    res.setHeader("Service-Run-Id", runId);
    const head: CompletionHead = { id: `chatcmpl-${runId.slice(4)}`, created: Math.floor(now.getTime() / 1000), model: ECHO_MODEL };
    const events: StoredEvent[] = [
      ...(text.match(/\S+\s*|\s+/g) ?? []).map((piece, i): StoredEvent => ({ seq: i + 1, kind: "text_delta", data: { kind: "text_delta", turn: 1, text: piece } })),
      { seq: 0, kind: "run_completed", data: { kind: "run_completed", output: text, usage: { ...usage, costClass: costClassOf("service"), amountMicros: 0 }, stopReason: "stop" } },
    ];
    if (body.stream) {
      const stream = new EventStreamWriter(res);
      const writer = new ChunkWriter(head, body.stream_options?.include_usage === true, (frame) => stream.write(frame), res.req.id);
      writer.open();
      for (const e of events) writer.event(e);
      stream.end();
      return stream.out;
    }
    const builder = new CompletionBuilder(head);
    for (const e of events) builder.event(e);
    return (builder.result as { completion: z.infer<typeof ChatCompletion> }).completion;
  }
}
