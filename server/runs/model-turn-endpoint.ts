import type { Response } from "express";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import type { Tenant } from "../keys/keys.js";
import type { RunBus } from "./bus.js";
import type { RunStore } from "./store.js";
import type { StoredEvent } from "./run-rows.js";
import { DEFAULT_CHAT_ROUTE } from "./routing.js";
import { followRun, type Flow, type FollowEnd } from "./follow-run.js";
import type { BegunRun, RunService, RunSpec } from "./runs.js";

/**
 * What the chat-completions and responses endpoints share: a run of one model
 * turn whose caller owns the loop, begun on a model runtime of the user's own
 * machine (handed back to the app, counted, when none can take it), its events
 * followed as they come and turned into the endpoint's shapes.
 */
export abstract class ModelTurnEndpoint {
  constructor(
    protected readonly db: Database,
    protected readonly clock: Clock,
    protected readonly runs: RunService,
    protected readonly store: RunStore,
    private readonly bus: RunBus,
    protected readonly log: Logger,
  ) {}

  /**
   * Begins the turn's run (or finds a repeat's), names it in `Service-Run-Id`, and throws
   * the counted 409 `serve_in_app` when it was handed back; `what` the caller serves then
   * ("completion", "response").
   */
  protected async beginTurn(tenant: Tenant, res: Response, spec: Omit<RunSpec, "prefer">, what: string): Promise<BegunRun> {
    const started = await this.runs.begin(tenant, { ...spec, prefer: DEFAULT_CHAT_ROUTE });
    res.setHeader("Service-Run-Id", started.runId);
    if (started.handedBack) throw await this.runs.modelTurnHandback(tenant, started, spec.user, spec.model, what);
    return started;
  }

  /** Follows the run's events from its start (`followRun`, paced by `flow` when it streams): how to stop following. */
  protected follow(runId: string, onEvent: (e: StoredEvent) => void, onEnd: (why: FollowEnd) => void, readFirst: boolean, flow?: Flow): () => void {
    return followRun(this.store, this.bus, this.log, runId, 0, onEvent, onEnd, readFirst, flow);
  }
}
