import type { RuntimeAdvert, RuntimeLimits } from "@svc/contract";
import { runtimeCost } from "../ledger/metering.js";
import type { Candidate } from "../runs/routing.js";

/**
 * What a machine connected to this instance offers routing, kept with its
 * connection: its runtimes as last advertised, which are busy (its heartbeats),
 * their subscription windows (its reports, and what its runtimes' rows held when
 * it said hello). A run of its user started on this instance is routed from this
 * instead of the rows (RunService.begin), and `svc_start_run` checks in the same
 * statement what this cannot know: a machine held elsewhere, a removal, the slots.
 */
export class HeldRuntimes {
  private adverts: RuntimeAdvert[] = [];
  private busy = new Set<string>();
  private windows = new Map<string, RuntimeLimits>();
  /** When the machine said hello here: of two machines, the one connected last is tried first (as `reachableRuntimes` orders them). */
  readonly since = Date.now();

  /** Each runtime's cap, as advertised. */
  caps = new Map<string, number>();

  /** A runtimes list (hello or `runtimes`): the windows of runtimes it no longer has go. */
  advertised(runtimes: RuntimeAdvert[]): void {
    // A name said twice: the last one, as the rows keep it.
    this.adverts = [...new Map(runtimes.map((r) => [r.name, r])).values()];
    this.caps = new Map(this.adverts.filter((r) => r.maxConcurrentJobs !== undefined).map((r) => [r.name, r.maxConcurrentJobs!]));
    for (const name of this.windows.keys()) if (!this.has(name)) this.windows.delete(name);
  }

  /** The windows its runtimes' rows hold (reported before, kept across the machine's reconnects): taken where nothing newer was reported here. */
  stored(windows: Map<string, RuntimeLimits>): void {
    for (const [name, limits] of windows) if (this.has(name) && !this.windows.has(name)) this.windows.set(name, limits);
  }

  private has(runtime: string): boolean {
    return this.adverts.some((r) => r.name === runtime);
  }

  /** A heartbeat's busy runtimes: an idle machine's beat (most frames of an idle fleet) allocates nothing while it stays idle. */
  beat(busy: string[]): void {
    if (busy.length === 0 && this.busy.size === 0) return;
    this.busy = new Set(busy);
  }

  limits(runtime: string, limits: RuntimeLimits): void {
    if (this.has(runtime)) this.windows.set(runtime, limits);
  }

  /** Its runtimes as routing's candidates; `active(runtime)`: its jobs sent or waiting here. */
  candidates(machineId: string, instance: string, active: (runtime: string) => number): Candidate[] {
    return this.adverts
      .filter((r) => r.supported !== false && !r.unavailable)
      .map((r) => ({
        machine_id: machineId,
        instance,
        runtime: r.name,
        kind: r.kind,
        billing: runtimeCost(r.kind, r.billing).billing,
        models: r.models,
        busy: this.busy.has(r.name),
        cap: r.maxConcurrentJobs ?? null,
        active: r.maxConcurrentJobs === undefined ? 0 : active(r.name),
        limits: this.windows.get(r.name) ?? null,
      }));
  }
}
