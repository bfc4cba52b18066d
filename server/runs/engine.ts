import type { Clock } from "../clock.js";
import type { Notifications } from "../db/open.js";
import type { Logger } from "../logger.js";
import type { WorkerHub } from "../workers/hub.js";
import type { Tenant } from "../keys/keys.js";
import type { Candidate } from "./routing.js";
import { AgentRunDriver } from "./agent-relay.js";
import type { RunBus } from "./bus.js";
import type { Answer, DriverDeps, RunDriver, RunEnded } from "./driver.js";
import { readEventNotice, readWake } from "./notices.js";
import { Cancelled, DEFAULT_RUN_LIMITS, RunStop } from "./run-stop.js";
import type { RunLimitsConfig } from "../config.js";
import { ModelRunDriver } from "./model-loop.js";
import { ChatTurnDriver } from "./chat-turn.js";
import { EchoRuntime } from "./echo-runtime.js";
import type { WebhookFacts } from "../webhooks/facts.js";
import { RUN_DISPATCH_CHANNEL, RUN_EVENT_CHANNEL, RUN_INPUT_CHANNEL, type RunStore } from "./store.js";
import type { RunRow } from "./run-rows.js";
import { isModelTurn } from "./run-rows.js";
import { isDatabaseUnavailable, type DatabaseOutage } from "../db/outage.js";
import { requestScope } from "../request-scope.js";

/** The sweep looks for finished runs left on the run bus every this many passes (about 30 s)... */
const COMPACT_SWEEP_EVERY = 30;
/** ...and takes those ended at least this long ago (their driver compacts them itself at their end). */
const COMPACT_AFTER_MS = 30_000;

export interface EngineOptions {
  leaseSeconds: number;
  /** How long a run waits for its machine to come back (anywhere) before it fails `worker_lost`. */
  graceSeconds: number;
  pollMs?: number;
  /** Told when a run ends (`run.finished` webhooks). */
  facts?: WebhookFacts;
  /** Per-run limits and deadlines (default: `DEFAULT_RUN_LIMITS`). */
  limits?: RunLimitsConfig;
  /** Told when a pass meets the database unreachable: the outage is logged once, not once a second. */
  outage?: DatabaseOutage;
  /** Told when a run driven here ended, once its end is stored (the metrics' `svc_runs_finished_total`). */
  ended?: RunEnded;
}

/**
 * Which runs this instance drives, and the rules that move runs between
 * instances. A run is driven where its machine's connection is held, under a
 * lease renewed every third of its length. New runs for a machine held
 * elsewhere are announced to that instance; a sweep (the fallback for lost
 * notifications, and the takeover after a crash) claims what this instance can
 * drive whose lease lapsed, and fails what nobody could drive for the grace (its
 * machine gone that long) or what never will be (its machine removed).
 */
export class RunEngine {
  private readonly drivers = new Map<string, RunDriver>();
  private readonly deps: DriverDeps;
  private timers: NodeJS.Timeout[] = [];
  private stops: (() => Promise<void>)[] = [];
  private closing = false;
  private sweeps = 0;

  constructor(
    private readonly store: RunStore,
    private readonly bus: RunBus,
    hub: WorkerHub,
    private readonly notifications: Notifications,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly options: EngineOptions,
  ) {
    this.deps = { store, bus, hub, echo: new EchoRuntime(), clock, log, pollMs: options.pollMs ?? 10_000, facts: options.facts, limits: options.limits ?? DEFAULT_RUN_LIMITS, outage: options.outage, ended: options.ended };
  }

  get instance(): string {
    return this.store.instance;
  }

  async start(): Promise<void> {
    this.stops.push(
      await this.notifications.listen(
        RUN_INPUT_CHANNEL,
        (payload) => this.onWake(payload),
        () => this.wakeDrivers(),
      ),
      // Readers are woken by this notification only (never by a timer): when its connection was lost, every reader here looks once.
      await this.notifications.listen(
        RUN_EVENT_CHANNEL,
        (payload) => {
          const { runId, writer } = readEventNotice(payload, false);
          // Every instance hears every step: one without a reader of that run here, or the writer, only drops it.
          if (writer === this.instance || !this.bus.hasReaders(runId)) return;
          const { events } = readEventNotice(payload);
          // The step's events came with it (short ones do): its readers here take them as they take the driver's; else they read.
          if (events) this.bus.stored(runId, events);
          else this.bus.wake(runId);
        },
        () => this.bus.wakeAll(),
      ),
      await this.notifications.listen(
        RUN_DISPATCH_CHANNEL,
        (payload) => {
          const [instance, runId] = payload.split(" ");
          if (instance === this.instance && runId) void this.claim(runId);
        },
        () => void this.claim().catch(() => {}),
      ),
    );
    // On the run bus, wakes and dispatch come to this instance alone, on subjects of its own (the
    // notifications above stay for runs' wakes sent by plan changes, and for a deployment's switch).
    const stream = this.store.stream;
    if (stream) {
      for (const stop of [stream.listen(this.instance, "input", (payload) => this.onWake(payload)), stream.listen(this.instance, "dispatch", (runId) => void this.claim(runId).catch(() => {}))]) {
        this.stops.push(async () => stop());
      }
    }
    const leaseMs = this.options.leaseSeconds * 1000;
    this.every(leaseMs / 3, () => this.renew());
    this.every(Math.min(leaseMs / 3, 1000), () => this.sweep());
  }

  /** Drives a run: one this instance just `created` with its lease (its machine is connected here), or one it claimed. */
  drive(run: RunRow, created = false): void {
    if (this.closing || this.drivers.has(run.id)) return;
    const driver = this.driverFor(run);
    if (created) driver.startsFresh();
    driver.waitedBy = requestScope.getStore()?.timing ?? null;
    this.drivers.set(run.id, driver);
    // Its readers here are fed from memory, also one that subscribes a moment after the driver began.
    this.bus.driving(run.id);
    // Outside the request that started it: the run outlives that request, and what fails in it is the run's, not the request's.
    // A run taken over on the bus first has its last step's events published (its driver may have died before it did).
    void requestScope
      .exit(() => (created || !this.store.streamed ? Promise.resolve() : this.store.streamed.republish(run)).then(() => driver.drive()))
      .catch((err) => this.log.warn({ err, runId: run.id }, "could not take a run over"))
      // Kept until its last write and its lease's release are in: a new driver of the run here must not have its lease given up by the old one's release.
      .then(() => driver.settled())
      .finally(() => {
        this.drivers.delete(run.id);
        this.bus.ended(run.id);
        this.compact(run.id);
        // Moved off this instance (its machine's link lost, say): a claim of the run skipped while this driver was still here (the machine back
        // at once) is made now, instead of when the lease it took lapses.
        if (driver.moved) void this.claim(run.id).catch((err) => this.log.warn({ err, runId: run.id }, "could not take a run over"));
      });
  }

  /** A chat completion is one turn; a run is the agent loop on a model runtime, or an agent CLI's loop relayed. */
  private driverFor(run: RunRow): RunDriver {
    if (isModelTurn(run.source)) return new ChatTurnDriver(this.deps, run);
    // The runtime's kind as routing found it (runs started before it was kept: the route says it).
    const agent = (run.request.runtimeKind ?? (run.route_kind === "user-subscription" ? "agent" : "model")) === "agent";
    return agent ? new AgentRunDriver(this.deps, run) : new ModelRunDriver(this.deps, run);
  }

  /** A wake for a run driven here, with the answer it carries (when it does). */
  private onWake(payload: string): void {
    const { runId, answer } = readWake(payload);
    this.drivers.get(runId)?.wake(answer);
  }

  /** Wakes the run's driver: here directly, elsewhere through a notification (on the run bus, to its instance alone). */
  async wake(runId: string, answer?: Answer): Promise<void> {
    const local = this.drivers.get(runId);
    if (local) return local.wake(answer);
    if (!this.store.stream) return this.notifications.notify(RUN_INPUT_CHANNEL, runId);
    const owner = await this.store.driverOf(runId);
    // Driven nowhere now: whoever claims it reads its inputs as it starts.
    if (owner && owner !== this.instance) this.store.stream.signal(owner, "input", runId);
  }

  /** Is the run driven here (an answer then wakes it directly; else the answer's statement notifies)? */
  drivesHere(runId: string): boolean {
    return this.drivers.has(runId);
  }

  /** Asks the instance holding a machine to drive a new run (on the run bus, on that instance's own subject). */
  async announce(instance: string, runId: string): Promise<void> {
    if (this.store.stream) return this.store.stream.signal(instance, "dispatch", runId);
    await this.notifications.notify(RUN_DISPATCH_CHANNEL, `${instance} ${runId}`);
  }

  /** The run bus's link is back after a break: wakes and dispatches sent meanwhile were lost, so every driver and reader here looks once, and runs to drive are claimed. */
  linkBack(): void {
    this.bus.wakeAll();
    this.wakeDrivers();
    void this.claim().catch(() => {});
  }

  /** The runtimes of this user's machines connected here (routing's candidates; none: no machine of theirs is here). */
  runtimesHere(owner: Tenant & { endUserId: string }): Candidate[] {
    return this.deps.hub.runtimesOf(owner);
  }

  /** Is this machine's worker connected to this instance (so its runs are driven here)? */
  holdsMachine(machineId: string): boolean {
    return this.deps.hub.holds(machineId);
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const t of this.timers) clearInterval(t);
    for (const d of this.drivers.values()) d.abandon();
    await Promise.all(this.stops.map((s) => s().catch(() => {})));
  }

  private every(ms: number, fn: () => Promise<void>): void {
    let busy = false;
    const t = setInterval(() => {
      if (busy || this.closing) return;
      busy = true;
      fn()
        // A database outage is logged once (by the outage record, which also probes for its end), not once a second here.
        .catch((err) => (isDatabaseUnavailable(err) && this.options.outage ? this.options.outage.report(err) : this.log.warn({ err }, "run engine task failed")))
        .finally(() => (busy = false));
    }, ms);
    t.unref();
    this.timers.push(t);
  }

  private leaseUntil(): Date {
    return new Date(this.clock.now().getTime() + this.options.leaseSeconds * 1000);
  }

  private async claim(runId?: string): Promise<void> {
    if (this.closing || (runId && this.drivers.has(runId))) return;
    const runs = await this.store.claim(this.clock.now(), this.leaseUntil(), runId);
    for (const run of runs) {
      // A sweep and a dispatch may both claim a run (the lease is already ours for the second): it is driven, and said, once.
      if (this.drivers.has(run.id)) continue;
      this.log.info({ runId: run.id, resumed: run.last_seq > 0 }, "run claimed");
      this.drive(run);
    }
  }

  private async renew(): Promise<void> {
    const ids = [...this.drivers.keys()];
    const held = await this.store.renew(ids, this.leaseUntil());
    for (const id of ids) if (!held.has(id)) this.drivers.get(id)?.abandon();
  }

  /**
   * Takes over runs this instance can drive; fails runs nobody could drive for the
   * grace, or whose machine was removed. Lost wakes are not its business: a wake
   * sent while this instance's LISTEN connection was down is made up for when it
   * is back (every driver looks once), and a driver looks by itself every
   * `RUN_POLL_MS` anyway (10,000 runs waiting on their tools once read 10,000
   * times a second here).
   */
  private async sweep(): Promise<void> {
    await this.claim();
    const now = this.clock.now();
    const before = new Date(now.getTime() - this.options.graceSeconds * 1000);
    for (const run of await this.store.claimOrphans(now, before, this.leaseUntil())) {
      const removed = run.machine_removed;
      const driver = this.driverFor(run);
      this.drivers.set(run.id, driver);
      // Cancelled while it waited for its machine: it ends as asked, at once.
      const stop = run.cancel_requested_at
        ? new Cancelled(run.cancel_reason)
        : removed
          ? new RunStop("worker_lost", "The user's machine was removed while the run was on it; the run cannot go on.")
          : new RunStop("worker_lost", `The user's machine was unreachable for longer than the ${this.options.graceSeconds} s it is waited for; the run cannot go on.`);
      if (!run.cancel_requested_at) this.log.warn({ runId: run.id, machineId: run.machine_id }, removed ? "run failed: its machine was removed" : "run orphaned: its machine was connected nowhere for the grace");
      void (this.store.streamed?.republish(run) ?? Promise.resolve())
        .then(() => driver.fail(stop))
        .finally(() => {
          this.drivers.delete(run.id);
          this.compact(run.id);
        });
    }
    await this.compactLeftovers(now);
  }

  /** A run ended here: on the bus, its events move to Postgres (`RunStore.compact`); a run not ended, or not on the bus, is left. */
  private compact(runId: string): void {
    void this.store.streamed?.compact(runId, this.bus.remembered(runId)).catch((err) => this.log.warn({ err, runId }, "could not compact a run's events (the sweep tries again)"));
  }

  /** Every COMPACT_SWEEP_EVERY sweeps: finished runs whose events are still on the bus a while after their end (their driver died first). */
  private async compactLeftovers(now: Date): Promise<void> {
    const streamed = this.store.streamed;
    if (!streamed || ++this.sweeps % COMPACT_SWEEP_EVERY !== 0) return;
    for (const id of await streamed.uncompacted(new Date(now.getTime() - COMPACT_AFTER_MS), 50)) {
      if (!(await streamed.compact(id))) this.log.warn({ runId: id }, "a finished run's events are missing from the run bus: left there");
    }
  }

  /** Every driver here looks at its inputs (a wake may have been lost). */
  private wakeDrivers(): void {
    for (const d of this.drivers.values()) d.wake();
  }
}
