import type { z } from "zod";
import type { ApprovalDecision, CreateRunRequest, RaiseBudgetRequest, RunMessageRequest, RunMessageResponse, RouteKind, Run as RunView, RunRoute, RunSource, RunUsage, ToolResultRequest, ApprovalRequest } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import { costClassOf, periodOf } from "../ledger/metering.js";
import { overageMicros, type StartRunOutcome } from "../ledger/functions.js";
import { RunStarts } from "./run-starts.js";
import { ensureEndUser } from "../users/end-users.js";
import { chooseRoute, DEFAULT_CHAT_ROUTE, DEFAULT_RUN_ROUTE, pickRoute, reachableRuntimes, type Candidate, type Route } from "./routing.js";
import { followUpOf, historyOf, newSession, type FollowUp } from "./conversations.js";
import { busyReason, noRouteReason } from "./route-refusals.js";
import type { RunEngine } from "./engine.js";
import { wakePayload } from "./notices.js";
import type { Answer, RunEnded } from "./driver.js";
import type { RunStore } from "./store.js";
import { ACTIVE_STATUSES, type RunRow } from "./run-rows.js";
import type { WebhookFacts } from "../webhooks/facts.js";
import { ECHO_MODEL, parseScript, ScriptError } from "./echo-script.js";
import { runView, type RunRecord } from "./run-view.js";
import { ledgerWrite, runOrigin } from "../telemetry/spans.js";
import { userStanding } from "../users/standing.js";
import { RunBudgets } from "./budgets.js";
import { budgetNote } from "./limits.js";
import type { RoutedBy } from "../metrics/metrics.js";

type RunRequest = RunRow["request"] & Record<string, unknown>;

/** The model a run on this route runs: the one its runtime serves for what was asked (an agent CLI's own default: what was asked). */
function modelOn(route: Route, asked: string): string {
  return route.kind !== "app" && route.model ? route.model : asked;
}

/** How soon a run refused `compute_busy` is worth trying again: a slot frees when a job ends. */
const COMPUTE_BUSY_RETRY_SECONDS = 5;

/** What starts a run, from either endpoint. */
export interface RunSpec {
  user: string;
  model: string;
  prefer: RouteKind[];
  source: RunSource;
  request: RunRequest;
  /** A repeat of a request with the same `Idempotency-Key`: the run its first request started, answered again. */
  replayRunId?: string;
  /** Routed to this machine's runtime only (a follow-up resuming an agent CLI's session there). */
  pin?: { machineId: string; runtime: string };
}

/** A run begun (or, for a repeat, found): `createdAt` is when it was first started, so a repeat's answer names the first one's time. */
export interface BegunRun {
  runId: string;
  endUserId: string;
  handedBack: boolean;
  repeated: boolean;
  model: string;
  drivenHere: boolean;
  createdAt: Date;
  /** A handback because what would serve it is full (its queue at its bound): why, in words. */
  busy?: string;
}

/**
 * What the app does to runs: start one (attributed, counted, routed), answer its
 * tool calls and approvals, cancel it, report the usage of a run it served
 * itself, read it. Any instance answers any of these; the run's driver (on the
 * instance holding its machine) is woken by the engine.
 */
export class RunService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly store: RunStore,
    private readonly engine: RunEngine,
    private readonly leaseSeconds: number,
    private readonly facts: WebhookFacts,
    /** Runs one machine may hold waiting for a slot (`RUN_QUEUE_PER_MACHINE`). */
    private readonly queueBound: number = 100,
    /** Told how each started run's route was chosen (the metrics' `svc_run_routes_total`). */
    private readonly onRouted: (how: RoutedBy) => void = () => {},
    /** Told of each run that ended here without a driver: handed to the app at its start, or a `svc/echo` answer (the metrics' `svc_runs_finished_total`; runs driven here are told by the engine). */
    private readonly onEnded: RunEnded = () => {},
  ) {
    this.budgets = new RunBudgets(db, engine);
    this.starts = new RunStarts(db);
  }

  private readonly budgets: RunBudgets;
  private readonly starts: RunStarts;

  /** A run that ended here without a driver (handed back at its start, a `svc/echo` answer recorded whole). */
  ended(status: string, routeKind: string | null): void {
    this.onEnded(status, routeKind);
  }

  /** Why nothing on the user's machines took the run, in words that say what is true (`route-refusals.ts`). */
  whyNoRoute(tenant: Tenant, endUserId: string, user: string, model: string, prefer: RouteKind[]): Promise<string> {
    return noRouteReason(this.db, this.clock, tenant, endUserId, user, model, prefer);
  }

  /**
   * The counted handback of a model turn its caller owns (a chat completion, `what`: "completion";
   * a response): 409 `serve_in_app` saying why and where to report the usage, which the OpenAI
   * clients are told not to retry (they retry 409s unless told).
   */
  async modelTurnHandback(tenant: Tenant, started: BegunRun, user: string, model: string, what: string): Promise<ApiError> {
    const why = started.busy ?? (await this.whyNoRoute(tenant, started.endUserId, user, model, DEFAULT_CHAT_ROUTE));
    return new ApiError("serve_in_app", `User ${user} has no reachable model runtime for model ${model}: ${why}; serve this ${what} with the app's own client and report its usage to POST /v1/runs/${started.runId}/usage. It is counted.`, {
      headers: { "Service-Run-Id": started.runId, "x-should-retry": "false" },
    });
  }

  /** `POST /v1/runs`: starts a run and answers 409 `serve_in_app` (counted) when it is handed back. */
  async start(tenant: Tenant, body: CreateRunRequest, replayRunId?: string): Promise<{ runId: string; drivenHere: boolean }> {
    // A follow-up: what it continues (checked first: another user's run is a 404 whatever else the request says).
    const follow = replayRunId ? null : await followUpOf(this.db, tenant, body);
    const previous = follow?.previous.request;
    // Omitted on a follow-up: what the previous run asked for (`auto` stays `auto`).
    const model = body.model ?? previous?.model ?? follow?.previous.model ?? "auto";
    let prefer = body.route?.prefer ?? DEFAULT_RUN_ROUTE;
    const request: RunRequest = {
      prompt: body.prompt,
      // Omitted on a follow-up: the previous run's; given: they replace them.
      system: body.system ?? previous?.system,
      tools: body.tools ?? previous?.tools,
      limits: body.limits,
      budget: body.budget,
      metadata: body.metadata,
      model,
      route: body.route,
    };
    let pin: RunSpec["pin"];
    if (follow) {
      Object.assign(request, { previousRunId: follow.previous.id, onSessionLost: follow.onSessionLost });
      const session = follow.session;
      const lost = session ? await this.sessionUnreachable(tenant, follow) : null;
      if (session && !lost) {
        // The agent CLI's session lives on its machine: the follow-up goes there, to that runtime, or nowhere.
        pin = { machineId: session.machineId, runtime: session.runtime };
        prefer = [session.routeKind];
        request.session = { id: session.id, resume: true };
      } else {
        if (lost && follow.onSessionLost === "refuse") throw new ApiError("session_unavailable", `${lost} Retry when it is online, or start the follow-up with onSessionLost: "restart" to begin a fresh session on any route with the stored transcript as context. Nothing was run or counted.`, { param: "previousRunId", headers: { "Retry-After": "30" } });
        if (lost) request.sessionRestarted = lost;
        // The conversation lives in the service: it goes first, to whichever runtime is picked.
        request.history = await historyOf(this.db, follow.previous.id);
      }
    }
    // On the pinned runtime: the model asked now (another of that CLI's models), else the one the session ran.
    const started = await this.begin(tenant, { user: body.user, model: pin ? (body.model ?? follow!.session!.asked) : model, prefer, source: "runs", request, replayRunId, pin });
    if (started.handedBack) {
      const why = started.busy ?? (await this.whyNoRoute(tenant, started.endUserId, body.user, started.model, prefer));
      throw new ApiError("serve_in_app", `User ${body.user} has no reachable compute for model ${started.model} on the routes asked (${prefer.filter((k) => k !== "app").join(", ") || "app only"}): ${why}; serve it in the app and report its usage to POST /v1/runs/${started.runId}/usage. The run is counted.`, {
        headers: { "Service-Run-Id": started.runId },
      });
    }
    return { runId: started.runId, drivenHere: started.drivenHere };
  }

  /**
   * Why an agent CLI's session cannot be reached for a follow-up now (its machine removed, offline, or not serving
   * that CLI), in words; null: it can.
   */
  private async sessionUnreachable(tenant: Tenant, follow: FollowUp): Promise<string | null> {
    const s = follow.session!;
    const { hostname, machine_revoked: revoked, end_user_id: endUserId } = follow.previous;
    const where = `The ${s.runtime} session of run ${follow.previous.id} is on machine ${s.machineId}${hostname ? ` (${hostname})` : ""}`;
    if (hostname === null || revoked) return `${where}, which was removed from the app: the session cannot be continued.`;
    const reachable = await reachableRuntimes(this.db, this.clock, tenant, endUserId);
    if (!reachable.some((c) => c.machine_id === s.machineId)) return `${where}, which is offline.`;
    if (!reachable.some((c) => c.machine_id === s.machineId && c.runtime === s.runtime)) return `${where}, which is online but does not serve ${s.runtime} now (turned off, or unable to run there).`;
    return null;
  }

  /**
   * `POST /v1/runs/:id/messages`: a user message for a run that works, kept until its driver hands it to the agent
   * (an agent CLI mid-turn: `now`; a model run before its next model call: `next_turn`). Woken wherever it is driven.
   */
  async sendMessage(tenant: Tenant, runId: string, body: z.infer<typeof RunMessageRequest>): Promise<z.infer<typeof RunMessageResponse>> {
    const messageId = randomId("msg_", 20);
    // Another app's, environment's or user's run: the same 404 as an unknown one, before anything is kept.
    const run = await this.find(tenant, runId, body.user);
    const taken = await this.store.addMessage(tenant, runId, messageId, body.content, this.clock.now());
    if (!taken && run.source !== "runs") throw new ApiError("conversation_unavailable", `Run ${runId} is a ${run.source === "chat" ? "chat completion" : "response"}: its caller owns the conversation and sends the next message itself.`);
    if (!taken) throw new ApiError("run_finished", `Run ${runId} has already ended (${run.status}): a message can no longer reach it. Continue its conversation with a follow-up run (POST /v1/runs with previousRunId).`);
    await this.engine.wake(runId, { kind: "message", messageId, content: body.content });
    const delivery = taken.agent && (taken.status === "running" || taken.status === "waiting") ? "now" : "next_turn";
    return { runId, messageId, delivery };
  }

  /**
   * Starts a run of any source: routed, then, with the user's row locked while
   * the plan is checked and the run counted (so concurrent starts never pass the
   * allowance), created with its ledger row; then driven here or announced to the
   * instance holding its machine. A handback is created and counted too. A repeat
   * of an idempotent request (`replayRunId`) gets the run its first request started.
   */
  async begin(tenant: Tenant, spec: RunSpec): Promise<BegunRun> {
    if (spec.replayRunId) {
      const [first] = await this.db.query<{ id: string; end_user_id: string; status: string; model: string; created_at: Date }>(
        `SELECT id, end_user_id, status::text AS status, model, created_at FROM runs WHERE id = $1 AND app_id = $2 AND environment = $3::"Environment"`,
        [spec.replayRunId, tenant.appId, tenant.environment],
      );
      if (!first) throw new ApiError("not_found", "The run this Idempotency-Key started is gone.");
      return { runId: first.id, endUserId: first.end_user_id, handedBack: first.status === "handed_back", repeated: true, model: first.model, drivenHere: false, createdAt: new Date(first.created_at) };
    }
    // The `svc/` namespace is the service's own: a name there that is not one of its models is a typo, not a model to look for on machines.
    if (spec.model.startsWith("svc/") && spec.model !== ECHO_MODEL) {
      throw new ApiError(
        "invalid_request",
        `Unknown model ${JSON.stringify(spec.model)}: the service's own model is ${ECHO_MODEL} (did you mean ${ECHO_MODEL}?). The others are \`auto\`, a model name, or \`<runtime>/<model>\` served by the user's machines (GET /v1/models?user=${spec.user} lists them). Nothing was run or counted.`,
        { param: "model" },
      );
    }
    // Traced: the request's trace context goes with the run, so whichever instance drives it continues that trace.
    const origin = runOrigin(spec.user);
    if (origin) Object.assign(spec.request, { otel: origin });
    if (spec.model === ECHO_MODEL && spec.source === "runs") return this.beginEcho(tenant, spec);
    const endUser = { id: await ensureEndUser(this.db, tenant, spec.user) };
    const now = this.clock.now();
    const runId = randomId("run_", 24);
    const request = spec.request;
    // Routed in memory when a machine of the user's is connected here (the one statement then checks what memory cannot know); else from the rows.
    const here = spec.prefer[0] === "app" ? [] : this.engine.runtimesHere({ ...tenant, endUserId: endUser.id });
    const only = spec.pin ? (c: Candidate) => c.machine_id === spec.pin!.machineId && c.runtime === spec.pin!.runtime : undefined;
    let choice = here.length ? pickRoute(only ? here.filter(only) : here, now, spec.model, spec.prefer, this.queueBound) : null;
    let routedHere = !!choice?.route;
    if (!routedHere) choice = await chooseRoute(this.db, this.clock, tenant, endUser.id, spec.model, spec.prefer, this.queueBound, only);
    let rerouted = false;
    let started: { route: Route; r: StartRunOutcome; model: string; local: boolean; busy?: string } | null = null;
    for (let tries = 0; !started; tries++) {
      const { route, full } = choice!;
      // A machine online but full (its queue at its bound) is busy, not missing: 429 with when to come back.
      const busy = full.length ? busyReason(spec.user, full, this.queueBound) : undefined;
      if (!route && busy) throw new ApiError("compute_busy", `User ${spec.user}'s compute for model ${spec.model} is busy and the routes asked (${spec.prefer.join(", ")}) allow nothing else: ${busy}. Retry after the time in Retry-After, or allow the \`app\` route.`, { headers: { "Retry-After": String(COMPUTE_BUSY_RETRY_SECONDS) } });
      if (!route && spec.pin) {
        throw new ApiError(
          "session_unavailable",
          `The ${spec.pin.runtime} session of run ${spec.request.previousRunId} is on machine ${spec.pin.machineId}, whose ${spec.pin.runtime} does not take model ${spec.model} now (a follow-up goes on in that CLI's session: ask for ${spec.pin.runtime} or ${spec.pin.runtime}/<model>, or the machine stopped serving it meanwhile). Nothing was run or counted; retry, or start the follow-up with onSessionLost: "restart".`,
          { param: "previousRunId", headers: { "Retry-After": "5" } },
        );
      }
      if (!route) throw new ApiError("no_compute", `User ${spec.user} has no reachable compute for model ${spec.model} on the routes asked (${spec.prefer.join(", ")}): ${await this.whyNoRoute(tenant, endUser.id, spec.user, spec.model, spec.prefer)}.`);
      const { r, local } = await this.startOn(route, routedHere, tenant, endUser.id, runId, spec, now);
      // What memory could not know changed the choice (a machine of the user's held elsewhere, a removal, the slots): routed again from the rows. A machine removed since: not chosen again.
      if (r.outcome === "reroute" && tries < 3) {
        choice = await chooseRoute(this.db, this.clock, tenant, endUser.id, spec.model, spec.prefer, this.queueBound, only);
        routedHere = false;
        rerouted = true;
        continue;
      }
      if (r.outcome === "reroute") throw new ApiError("service_unavailable", `User ${spec.user}'s machines changed while the run was being routed, again and again: nothing was run or counted. Try again in a moment.`, { headers: { "Retry-After": "1" } });
      started = { route, r, model: modelOn(route, spec.model), local, busy };
    }
    const { route, r, model, local, busy } = started;
    // The app asked first: nothing about machines was read, as for a route chosen in memory.
    this.onRouted(rerouted ? "rerouted" : routedHere || spec.prefer[0] === "app" ? "memory" : "rows");
    const app = route.kind === "app";
    if (r.outcome === "allowance_exhausted") {
      this.allowanceReached(tenant, endUser.id, r, now);
      const allowance = await userStanding(this.db, tenant, endUser.id, now);
      throw new ApiError("allowance_exhausted", `The user's plan allows ${r.allowance} ${r.unit} this period and ${r.consumed} are used: nothing was run. It resets at ${allowance.resetsAt}.`, { allowance });
    }
    if (r.outcome === "spend_ceiling_reached") {
      const allowance = await userStanding(this.db, tenant, endUser.id, now);
      throw new ApiError("spend_ceiling_reached", `The user's spend this period (${r.consumed} micros) reached the plan's ceiling of ${r.ceiling} micros: nothing was run. It resets at ${allowance.resetsAt}.`, { allowance });
    }
    if (r.outcome === "started" && r.allowance !== null && r.unit === "runs" && BigInt(r.consumed!) >= BigInt(r.allowance)) this.allowanceReached(tenant, endUser.id, r, now);
    // A counted start may cross the plan's alert thresholds (a runs allowance, or a run's price against the ceiling).
    if (r.outcome === "started" && (r.allowance !== null || r.ceiling !== null)) void this.facts.checkThresholds(tenant, endUser.id, now);
    const repeat = r.outcome === "repeat" ? { id: r.run_id!, status: r.run_status!, model: r.run_model! } : null;
    if (r.ceiling !== null) Object.assign(request, { spendCeilingMicros: String(r.ceiling), spendPeriod: r.spend_period });
    // Nothing can pause this run (no ceiling, no tokens allowance, no budget): its driver here need not look between turns.
    if (r.ceiling === null && !(r.unit === "tokens" && r.allowance !== null) && !request.budget) request.unlimited = true;
    if (repeat) return { runId: repeat.id, endUserId: endUser.id, handedBack: repeat.status === "handed_back", repeated: true, model: repeat.model, drivenHere: false, createdAt: now };
    // A follow-up names the run it continues (the dashboard's chain, the next follow-up's history).
    if (request.previousRunId) await this.linkPrevious(runId, request.previousRunId);
    if (app) {
      this.ended("handed_back", "app");
      return { runId, endUserId: endUser.id, handedBack: true, repeated: false, model, drivenHere: false, createdAt: now, busy };
    }
    if (local) this.engine.drive(newRunRow(runId, tenant, endUser.id, spec.source, model, request, route), true);
    else await this.engine.announce(route.instance, runId);
    return { runId, endUserId: endUser.id, handedBack: false, repeated: false, model, drivenHere: local, createdAt: now };
  }

  /**
   * The one statement that starts a run on the route chosen (`svc_start_run`, with the user's
   * other starts waiting at that moment: `RunStarts`): the
   * user's row locked, the route checked (a machine removed on any instance is never
   * taken; one chosen in memory, `routedHere`, also against machines held elsewhere
   * and its slots), the plan's allowance checked, the run and its ledger row written.
   * Driven here (its lease ours) when its machine is connected here.
   */
  private async startOn(route: Route, routedHere: boolean, tenant: Tenant, endUserId: string, runId: string, spec: RunSpec, now: Date): Promise<{ r: StartRunOutcome; local: boolean }> {
    const local = route.kind !== "app" && this.engine.holdsMachine(route.machineId);
    const app = route.kind === "app";
    const request = spec.request;
    // What the run's driver needs of the runtime chosen, kept with the run (another instance may drive it).
    if (app) {
      delete request.runtimeKind;
      delete request.billing;
    } else Object.assign(request, { runtimeKind: route.runtimeKind, billing: route.billing });
    // An agent CLI keeps its session on the machine (a follow-up resumes it there); a model run's conversation is the service's.
    if (!app && route.runtimeKind === "agent" && spec.source === "runs") request.session ??= newSession();
    else delete request.session;
    // A budget that may never be reached as given (nothing charged on this route or plan) is taken, and `run_started` says so.
    if (request.budget) request.budgetNote = await this.budgets.noteOf(tenant, endUserId, request.budget, { route_kind: route.kind, runtime_kind: app ? null : route.runtimeKind });
    const r = await ledgerWrite({ "svc.ledger.kind": "run", "svc.run.id": runId }, () => this.starts.start({
      runId,
      appId: tenant.appId,
      environment: tenant.environment,
      endUserId,
      source: spec.source,
      model: modelOn(route, spec.model),
      request,
      // No implicit retry window (svc_start_run still takes one): a repeat is named by its Idempotency-Key.
      requestHash: null,
      repeatSince: now,
      status: app ? "handed_back" : "queued",
      routeKind: route.kind,
      machineId: app ? null : route.machineId,
      runtime: app ? null : route.runtime,
      leaseOwner: local ? this.engine.instance : null,
      leaseExpiresAt: local ? new Date(now.getTime() + this.leaseSeconds * 1000) : null,
      now,
      costClass: route.costClass,
      period: periodOf(now),
      routedHere: routedHere ? { instance: this.engine.instance, cap: app ? null : route.cap, expectFree: app || route.free, queueBound: this.queueBound } : undefined,
    }), (r) => (r.outcome === "started" ? 1 : 0));
    return { r, local };
  }

  /**
   * A run on `svc/echo`: answered by the service itself (route `service`, cost
   * class `free`), whatever the route asked, and driven here by the same engine
   * like any run. Its script is checked first: a bad one is a 400 and nothing is
   * created. Free like a completion on `svc/echo`: no plan is checked and its
   * ledger row (kind `echo`) counts against no allowance.
   */
  private async beginEcho(tenant: Tenant, spec: RunSpec): Promise<BegunRun> {
    const request = spec.request;
    try {
      parseScript(request.prompt, (request.tools ?? []).map((t) => t.name));
    } catch (err) {
      if (err instanceof ScriptError) throw new ApiError("invalid_request", err.message, { param: "prompt" });
      throw err;
    }
    const endUserId = await ensureEndUser(this.db, tenant, spec.user);
    const now = this.clock.now();
    const runId = randomId("run_", 24);
    Object.assign(request, { runtimeKind: "model" });
    // Free and counted against no plan: only a budget can pause it.
    if (!request.budget) request.unlimited = true;
    if (request.budget) request.budgetNote = budgetNote(request.budget, { route_kind: "service", runtime_kind: "model", has_plan: false, overage: null, overage_price_micros: null });
    const route = { kind: "service" as const, machineId: null, runtime: "svc" };
    await this.store.createServiceRun({
      id: runId,
      tenant,
      endUserId,
      model: ECHO_MODEL,
      request,
      runtime: route.runtime,
      now,
      leaseUntil: new Date(now.getTime() + this.leaseSeconds * 1000),
      costClass: costClassOf("service"),
      period: periodOf(now),
    });
    this.engine.drive(newRunRow(runId, tenant, endUserId, spec.source, ECHO_MODEL, request, route), true);
    return { runId, endUserId, handedBack: false, repeated: false, model: ECHO_MODEL, drivenHere: true, createdAt: now };
  }

  /** A routed follow-up names the run it continues once started (`svc_start_run` writes the row and does not take it; svc/echo's insert does). */
  private async linkPrevious(runId: string, previousRunId: string): Promise<void> {
    await this.db.query(`UPDATE runs SET previous_run_id = $2 WHERE id = $1`, [runId, previousRunId]);
  }

  /** Tells the app (webhook `allowance.reached`), once per user and plan window, that the allowance is used up. */
  private allowanceReached(tenant: Tenant, endUserId: string, r: { allowance: string | null; consumed: string | null; unit: string | null; spend_period: string | null }, now: Date) {
    void this.facts.allowanceReached(tenant, endUserId, { unit: r.unit, allowance: Number(r.allowance), used: Number(r.consumed), period: r.spend_period ?? periodOf(now) });
  }

  async answerToolCall(tenant: Tenant, runId: string, body: z.infer<typeof ToolResultRequest>) {
    // The happy path is one statement; only a refused answer looks further, to say why.
    // A driver elsewhere is woken by the answer's own statement, the answer with it; one here, directly.
    const answer: Answer = { kind: "tool", callId: body.callId, result: body.result ?? null, isError: body.isError ?? false };
    const here = this.engine.drivesHere(runId);
    if (!(await this.store.answerToolCall(tenant, runId, body.callId, body.result, body.isError ?? false, this.clock.now(), body.user, here ? null : wakePayload(runId, answer)))) {
      await this.find(tenant, runId, body.user);
      await this.whyNot(tenant, runId, "tool_calls", "call_id", body.callId, "tool call");
    }
    // (Gone from here meanwhile: `wake` notifies.)
    if (here) await this.engine.wake(runId, answer);
    return { runId, callId: body.callId, accepted: true as const };
  }

  async answerApproval(tenant: Tenant, runId: string, body: z.infer<typeof ApprovalRequest>) {
    const decision: ApprovalDecision = body.decision === "allow" ? "allow" : "deny";
    const reason = body.reason ?? (decision === "deny" && body.decision !== "deny" ? `decision: ${body.decision}` : null);
    const answer: Answer = { kind: "approval", approvalId: body.approvalId, decision, reason };
    const here = this.engine.drivesHere(runId);
    if (!(await this.store.answerApproval(tenant, runId, body.approvalId, decision, reason, this.clock.now(), body.user, here ? null : wakePayload(runId, answer)))) {
      await this.find(tenant, runId, body.user);
      await this.whyNot(tenant, runId, "approvals", "approval_id", body.approvalId, "approval");
    }
    if (here) await this.engine.wake(runId, answer);
    return { runId, approvalId: body.approvalId, decision };
  }

  /** `POST /v1/runs/:id/budget`: the run's budget replaced field by field; a run paused at it is woken to look again. */
  async raiseBudget(tenant: Tenant, runId: string, body: z.infer<typeof RaiseBudgetRequest>) {
    const run = await this.find(tenant, runId, body.user);
    return this.budgets.raise(run, { maxMicros: body.maxMicros, maxTokens: body.maxTokens }, this.clock.now());
  }

  /** Asks the driver to stop; what was produced stays produced. */
  async cancel(tenant: Tenant, runId: string, body: { reason?: string; user?: string } | undefined) {
    const run = await this.find(tenant, runId, body?.user);
    if (!(ACTIVE_STATUSES as readonly string[]).includes(run.status)) throw new ApiError("run_finished", `Run ${runId} has already ended (${run.status}).`);
    await this.db.prisma.run.updateMany({ where: { id: runId, cancelRequestedAt: null }, data: { cancelRequestedAt: this.clock.now(), cancelReason: body?.reason ?? null } });
    await this.engine.wake(runId, { kind: "cancel", reason: body?.reason ?? null });
    return { runId, status: "stopping" };
  }

  /** The usage of a run the app served itself after a handback: accepted once, as one ledger row. */
  async reportUsage(tenant: Tenant, runId: string, body: z.infer<typeof RunUsage>) {
    const run = await this.find(tenant, runId, body.user);
    if (run.status !== "handed_back") throw new ApiError("invalid_request", `Run ${runId} was served by the service (${run.status}); usage is reported only for runs handed back with serve_in_app.`);
    const now = this.clock.now();
    let amount = BigInt(body.costMicros ?? 0);
    await this.db.prisma.$transaction(async (tx) => {
      // On a tokens plan with overage, the reported tokens past the allowance are priced too (svc_overage_micros).
      amount += await overageMicros(tx, { appId: tenant.appId, environment: tenant.environment, endUserId: run.endUserId, period: periodOf(run.createdAt), tokens: body.inputTokens + body.outputTokens });
      const claimed = await tx.run.updateMany({
        where: { id: runId, usageReportedAt: null },
        data: { usageReportedAt: now, inputTokens: BigInt(body.inputTokens), outputTokens: BigInt(body.outputTokens) },
      });
      if (claimed.count !== 1) throw new ApiError("usage_already_reported", `Usage of run ${runId} was already reported.`);
      await tx.usageRow.create({
        data: {
          ...tenant,
          endUserId: run.endUserId,
          runId,
          costClass: costClassOf("app"),
          kind: "app_usage",
          inputTokens: BigInt(body.inputTokens),
          outputTokens: BigInt(body.outputTokens),
          amountMicros: amount,
          period: periodOf(run.createdAt),
          uniqueKey: `usage:${runId}`,
          createdAt: now,
        },
      });
    });
    // What the app served counts toward the plan's thresholds (its tokens, its cost against a ceiling).
    void this.facts.checkThresholds(tenant, run.endUserId, this.clock.now());
    return { runId, costClass: costClassOf("app"), inputTokens: body.inputTokens, outputTokens: body.outputTokens, amountMicros: Number(amount) };
  }

  async get(tenant: Tenant, runId: string): Promise<z.infer<typeof RunView>> {
    return runView(await this.find(tenant, runId));
  }

  /** The run, if it is this app's and environment's (and this user's, when one is named); 404 otherwise, the same as an unknown id. */
  async find(tenant: Tenant, runId: string, user?: string): Promise<RunRecord & { endUser: { externalId: string } }> {
    const run = await this.db.prisma.run.findFirst({ where: { id: runId, appId: tenant.appId, environment: tenant.environment }, include: { endUser: { select: { externalId: true } } } });
    if (!run || (user !== undefined && run.endUser.externalId !== user)) throw new ApiError("not_found", `No run ${runId}${user !== undefined ? ` for user ${user}` : ""}.`);
    return run;
  }

  /** Why an answer was not taken: the run ended, it was answered already, or there is no such call. */
  private async whyNot(tenant: Tenant, runId: string, table: "tool_calls" | "approvals", column: string, id: string, what: string): Promise<never> {
    const run = await this.find(tenant, runId);
    const rows = await this.db.query<{ answered: boolean }>(`SELECT answered_at IS NOT NULL AS answered FROM ${table} WHERE run_id = $1 AND ${column} = $2`, [runId, id]);
    if (rows[0]?.answered) throw new ApiError("already_answered", `The ${what} ${id} of run ${runId} has already been answered.`);
    if (!(ACTIVE_STATUSES as readonly string[]).includes(run.status)) throw new ApiError("run_finished", `Run ${runId} has already ended (${run.status}).`);
    throw new ApiError("not_found", `Run ${runId} has no open ${what} ${id}.`);
  }
}

function newRunRow(id: string, tenant: Tenant, endUserId: string, source: RunSource, model: string, request: RunRow["request"], route: Pick<Exclude<Route, { kind: "app" }>, "runtime"> & { kind: RunRoute; machineId: string | null }): RunRow {
  return {
    id,
    source,
    app_id: tenant.appId,
    environment: tenant.environment,
    end_user_id: endUserId,
    model,
    request,
    status: "queued",
    route_kind: route.kind,
    machine_id: route.machineId,
    runtime_name: route.runtime,
    turns: 0,
    transcript: null,
    agent_state: null,
    output: null,
    input_tokens: 0,
    output_tokens: 0,
    last_seq: 0,
    cancel_requested_at: null,
    cancel_reason: null,
    paused_at: null,
  };
}
