import type { CostClass, RunStatus, Standing, WebhookEventType } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Logger } from "../logger.js";
import type { Tenant } from "../keys/keys.js";
import { userStanding } from "../users/standing.js";
import { recordPause, recordThresholds } from "../users/signals.js";
import type { WebhookOutbox } from "./outbox.js";
import type { EndpointInterest } from "./interest.js";

/** A machine as the facts about it name it. */
export interface MachineRef extends Tenant {
  machineId: string;
  endUserId: string;
}

/** How a run ended, as `run.finished` reports it. */
export interface RunOutcome {
  status: Extract<RunStatus, "completed" | "failed" | "cancelled">;
  stopReason: string | null;
  usage: { inputTokens: number; outputTokens: number; costClass: CostClass };
}

/** The run, as the driver knows it. */
export interface FinishedRun {
  id: string;
  app_id: string;
  environment: Tenant["environment"];
  end_user_id: string;
  source: string;
}

/**
 * What the services tell the app through webhooks, each fact under a key that
 * makes it one delivery however often it is reported (a retry, a takeover, two
 * instances). Reporting never fails the fact itself: the write that made it has
 * happened; an emit that fails is logged and the app's read endpoints still say
 * it. When no endpoint of the app wants the event, it costs nothing (the
 * tenant's interest is kept in memory: `EndpointInterest`).
 */
export class WebhookFacts {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly outbox: WebhookOutbox,
    private readonly db: Database,
    private readonly log: Logger,
    private readonly interest: EndpointInterest,
  ) {}

  /** A run reached completed, failed or cancelled (handed-back runs are the app's own to report). */
  runFinished(run: FinishedRun, outcome: RunOutcome): Promise<void> {
    const tenant = { appId: run.app_id, environment: run.environment };
    return this.report("run.finished", tenant, { endUserId: run.end_user_id }, `run.finished:${run.id}`, (user) => ({
      runId: run.id,
      user,
      status: outcome.status,
      stopReason: outcome.stopReason,
      source: run.source,
      usage: outcome.usage,
    }));
  }

  /** A machine was paired to its user (its token was handed out). */
  machinePaired(m: MachineRef, hostname: string, platform: string): Promise<void> {
    return this.report("machine.paired", m, { endUserId: m.endUserId }, `machine.paired:${m.machineId}`, (user) => ({ machineId: m.machineId, user, hostname, platform }));
  }

  /** A connection of the machine began serving it; `connectedAt` names that connection. */
  machineOnline(m: MachineRef, connectedAt: Date): Promise<void> {
    return this.report("machine.online", m, { endUserId: m.endUserId }, `machine.online:${m.machineId}:${connectedAt.getTime()}`, (user) => ({ machineId: m.machineId, user }));
  }

  /** The connection that began at `connectedAt` ended (closed, timed out, or its instance is gone). */
  machineOffline(m: MachineRef, connectedAt: Date): Promise<void> {
    return this.report("machine.offline", m, { endUserId: m.endUserId }, `machine.offline:${m.machineId}:${connectedAt.getTime()}`, (user) => ({ machineId: m.machineId, user }));
  }

  /** A user's plan or its subscription's status changed (a Stripe event, or the app's PUT /v1/users/:id/plan); `key` names the change. */
  planChanged(tenant: Tenant, user: string, change: Record<string, unknown>, key: string): Promise<void> {
    return this.report("plan.changed", tenant, { user }, key, () => ({ user, ...change }));
  }

  /** A user used up their allowance for a window: once per user, window and allowance. */
  allowanceReached(tenant: Tenant, endUserId: string, reached: { unit: string | null; allowance: number; used: number; period: string }): Promise<void> {
    return this.report("allowance.reached", tenant, { endUserId }, `allowance.reached:${endUserId}:${reached.period}:${reached.allowance}`, (user) => ({ user, ...reached }));
  }

  /** A run paused at a limit: recorded (the dashboard's signals) and reported, once per pause. */
  async runPaused(run: FinishedRun, paused: { limit: string; allowance: Standing; budget: unknown; pausedAt: string; expiresAt: string }): Promise<void> {
    const tenant = { appId: run.app_id, environment: run.environment };
    try {
      await recordPause(this.db, tenant, { endUserId: run.end_user_id, runId: run.id, limit: paused.limit, period: paused.allowance.period, pausedAt: paused.pausedAt });
    } catch (err) {
      this.log.error({ err, runId: run.id }, "could not record a run's pause");
    }
    return this.report("run.paused", tenant, { endUserId: run.end_user_id }, `run.paused:${run.id}:${paused.pausedAt}`, (user) => ({ runId: run.id, user, ...paused }));
  }

  /** A paused run resumed: once per pause. */
  runResumed(run: FinishedRun, resumed: { limit: string; reason: string; pausedMs: number }, pausedAt: string): Promise<void> {
    const tenant = { appId: run.app_id, environment: run.environment };
    return this.report("run.resumed", tenant, { endUserId: run.end_user_id }, `run.resumed:${run.id}:${pausedAt}`, (user) => ({ runId: run.id, user, ...resumed }));
  }

  /**
   * Records the plan's alert thresholds the user reached (`plan_signals`, one statement) and
   * sends `allowance.threshold` for each reached for the first time in its window: after a
   * counted run start, and after a run's end (its tokens and charges are in then). However
   * many instances look at once, a threshold is written, and sent, once.
   */
  async checkThresholds(tenant: Tenant, endUserId: string, now: Date): Promise<void> {
    const work = (async () => {
      const crossed = await recordThresholds(this.db, tenant, endUserId, now);
      if (crossed.length === 0) return;
      const standing = await userStanding(this.db, tenant, endUserId, now);
      await Promise.all(
        crossed.map((c) =>
          this.report("allowance.threshold", tenant, { endUserId }, `allowance.${c.key}`, (user) => ({ user, measure: c.measure, threshold: c.threshold, period: c.period, allowance: standing })),
        ),
      );
    })().catch((err) => this.log.error({ err, endUserId }, "could not look at a user's alert thresholds"));
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
    return work;
  }

  /**
   * An agent CLI's subscription window on a user's machine is spent (the CLI said `rejected`), or reset
   * (its reset time passed, or the CLI reports it usable again): once per machine, runtime, window and reset time.
   */
  runtimeWindow(kind: "spent" | "reset", m: MachineRef, runtime: string, window: { window: string; resetsAt?: string; usedPercent?: number }): Promise<void> {
    const type = kind === "spent" ? "runtime.window_spent" : "runtime.window_reset";
    return this.report(type, m, { endUserId: m.endUserId }, `${type}:${m.machineId}:${runtime}:${window.window}:${window.resetsAt ?? "unknown"}`, (user) => ({
      user,
      machineId: m.machineId,
      runtime,
      window: window.window,
      resetsAt: window.resetsAt ?? null,
      ...(kind === "spent" && window.usedPercent !== undefined ? { usedPercent: window.usedPercent } : {}),
    }));
  }

  /** Waits for the reports under way (shutdown: before the database closes). */
  async drain(): Promise<void> {
    await Promise.all(this.pending);
  }

  /** `who`: our id for the user (their own id is read once the event is wanted), or their own id when the caller has it. */
  private report(
    type: WebhookEventType,
    tenant: Tenant,
    who: { endUserId: string } | { user: string },
    key: string,
    data: (user: string) => Record<string, unknown>,
  ): Promise<void> {
    const work = (async () => {
      if (!(await this.interest.wants(tenant, type))) return;
      const user = "endUserId" in who ? await this.externalId(who.endUserId) : who.user;
      if (user === undefined) return;
      await this.outbox.emit(tenant, type, data(user), key);
    })().catch((err) => this.log.error({ err, type, key }, "could not record a webhook event"));
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
    return work;
  }

  private async externalId(endUserId: string): Promise<string | undefined> {
    const rows = await this.db.query<{ external_id: string }>(`SELECT external_id FROM end_users WHERE id = $1`, [endUserId], { prepared: true });
    return rows[0]?.external_id;
  }
}
