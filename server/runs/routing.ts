import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { HEARTBEAT_TIMEOUT_SECONDS } from "../machines/machines.js";
import { machineOnlineSql } from "../machines/liveness.js";
import type { RouteKind, RuntimeKind, RuntimeLimits, UsageWindow } from "@svc/contract";
import { costClassOf, runtimeCost, type Billing, type CostClassValue } from "../ledger/metering.js";

/** Where a run goes: a runtime on one of the user's machines, or back to the app. */
export type Route =
  | {
      kind: Exclude<RouteKind, "app">;
      costClass: CostClassValue;
      machineId: string;
      instance: string;
      runtime: string;
      runtimeKind: RuntimeKind;
      billing: Billing | null;
      model: string | null;
      /** The runtime's cap (null: none), and whether it had a free slot when chosen (else the run waits for one). */
      cap: number | null;
      free: boolean;
    }
  | { kind: "app"; costClass: CostClassValue };

export const DEFAULT_RUN_ROUTE: RouteKind[] = ["user-hardware", "user-subscription", "app"];
export const DEFAULT_CHAT_ROUTE: RouteKind[] = ["user-hardware", "app"];

/** Model servers before OpenAI-compatible extras and agent CLIs on a local model, then by name: a stable choice for `auto`. */
const MODEL_RUNTIME_ORDER = ["ollama", "llamacpp", "lmstudio"];

/** A runtime of one of the user's machines that can take work now. */
export interface Candidate {
  machine_id: string;
  instance: string;
  runtime: string;
  kind: RuntimeKind;
  /** For an agent CLI, what pays for its model (a `local_model` one serves under `user-hardware`). */
  billing: Billing | null;
  models: string[];
  busy: boolean;
  /** The runtime's advertised `maxConcurrentJobs` (null: no cap). */
  cap: number | null;
  /** Its runs that hold (or are about to hold) a job on the machine now. */
  active: number;
  /** An agent CLI's subscription windows as its machine last reported them (null: none reported). */
  limits: RuntimeLimits | null;
}

/** A `rejected` window that says no reset time is taken for spent this long after it was reported. */
export const SPENT_WITHOUT_RESET_MS = 60 * 60 * 1000;

/**
 * The window that keeps this runtime from taking runs now: a `rejected` one whose
 * reset time has not passed (the one resetting last, if several). None: it may be routed to.
 */
export function spentWindow(limits: RuntimeLimits | null | undefined, now: Date): (UsageWindow & { until: Date }) | null {
  let spent: (UsageWindow & { until: Date }) | null = null;
  for (const w of limits?.windows ?? []) {
    if (w.status !== "rejected") continue;
    const until = w.resetsAt ? new Date(w.resetsAt) : new Date(new Date(limits!.updatedAt).getTime() + SPENT_WITHOUT_RESET_MS);
    if (!(until.getTime() > now.getTime())) continue;
    if (!spent || until > spent.until) spent = { ...w, until };
  }
  return spent;
}

/** A window's name in words: `5h` the 5-hour window, `7d_opus` the 7-day Opus window, `300m` the 5-hour window. */
export function windowWords(window: string): string {
  const minutes = /^(\d+)m$/.exec(window);
  if (minutes) {
    const m = Number(minutes[1]);
    return m % 1440 === 0 ? `${m / 1440}-day window` : m % 60 === 0 ? `${m / 60}-hour window` : `${m}-minute window`;
  }
  if (window === "overage") return "overage allowance";
  const [len, model] = window.split("_");
  const span = /^(\d+)h$/.test(len) ? `${len.slice(0, -1)}-hour` : /^(\d+)d$/.test(len) ? `${len.slice(0, -1)}-day` : len;
  return `${span}${model ? ` ${model[0].toUpperCase()}${model.slice(1)}` : ""} window`;
}

/** A runtime that would serve the run but is at its cap, with its machine's queue full too. */
export interface FullRuntime {
  machineId: string;
  runtime: string;
  cap: number;
  /** Runs waiting for a slot on its machine. */
  waiting: number;
}

/** What routing found: the route (its runtime may be at its cap: the run then waits there for a slot), or none, with the runtimes that were full. */
export interface RouteChoice {
  route: Route | null;
  full: FullRuntime[];
}

/**
 * Picks the compute for a run among the user's reachable runtimes: one that
 * serves the model asked for. Route kinds are tried in the order asked. Within a
 * kind, a runtime with a free slot first; else one at its cap whose machine's
 * queue (runs waiting for a slot, across its runtimes) is below `queueBound`: the
 * run waits there (`queued`), first in first out. Only past that bound does the
 * next kind get its turn (`app`: a handback). No route: `full` says which
 * runtimes would have served but were full.
 */
export async function chooseRoute(sql: Sql, clock: Clock, tenant: Tenant, endUserId: string, model: string, prefer: RouteKind[], queueBound: number, only?: (c: Candidate) => boolean): Promise<RouteChoice> {
  // The app first: nothing on the machines is looked at.
  if (prefer[0] === "app") return { route: { kind: "app", costClass: costClassOf("app") }, full: [] };
  const candidates = await reachableRuntimes(sql, clock, tenant, endUserId);
  return pickRoute(only ? candidates.filter(only) : candidates, clock.now(), model, prefer, queueBound);
}

/** `chooseRoute`'s choice among runtimes already known: those of the rows, or those of the machines this instance holds (WorkerHub.runtimesOf). */
export function pickRoute(candidates: Candidate[], now: Date, model: string, prefer: RouteKind[], queueBound: number): RouteChoice {
  // A runtime whose subscription window is spent takes nothing until it resets: the next runtime or route is taken as usual.
  const rows = candidates.filter((r) => !spentWindow(r.limits, now));
  const full: FullRuntime[] = [];
  // Runs waiting for a slot on each machine: what its runtimes hold past their caps.
  const waiting = new Map<string, number>();
  for (const r of rows) if (r.cap !== null && r.active > r.cap) waiting.set(r.machine_id, (waiting.get(r.machine_id) ?? 0) + r.active - r.cap);
  const routeOn = (kind: Exclude<RouteKind, "app">, r: Candidate, served: string | null, free: boolean): Route => {
    const cost = runtimeCost(r.kind, r.billing);
    return { kind, costClass: cost.costClass, machineId: r.machine_id, instance: r.instance, runtime: r.runtime, runtimeKind: r.kind, billing: cost.billing, model: served, cap: r.cap, free };
  };
  for (const kind of prefer) {
    if (kind === "app") return { route: { kind: "app", costClass: costClassOf("app") }, full };
    const serving = rows
      .filter((r) => runtimeCost(r.kind, r.billing).route === kind)
      .sort(byPreference)
      .flatMap((r) => {
        const served = modelServed(r, model);
        return served === undefined ? [] : [{ r, served }];
      });
    const free = serving.find(({ r }) => r.cap === null || r.active < r.cap);
    if (free) return { route: routeOn(kind, free.r, free.served, true), full };
    // All at their cap: the machine with the shortest queue that still has room.
    const roomy = serving.filter(({ r }) => (waiting.get(r.machine_id) ?? 0) < queueBound).sort((a, b) => (waiting.get(a.r.machine_id) ?? 0) - (waiting.get(b.r.machine_id) ?? 0));
    if (roomy.length) return { route: routeOn(kind, roomy[0].r, roomy[0].served, false), full };
    for (const { r } of serving) full.push({ machineId: r.machine_id, runtime: r.runtime, cap: r.cap ?? 0, waiting: waiting.get(r.machine_id) ?? 0 });
  }
  return { route: null, full };
}

/**
 * The runtimes a run of this user could reach now: only machines of this user,
 * of this app and environment, not removed, connected to an instance that is
 * alive. Idle runtimes and the most recently connected machines first.
 */
export async function reachableRuntimes(sql: Sql, clock: Clock, tenant: Tenant, endUserId: string): Promise<Candidate[]> {
  const since = new Date(clock.now().getTime() - HEARTBEAT_TIMEOUT_SECONDS * 1000);
  return sql.query<Candidate>(
    // Active: the runs holding one of the runtime's slots (svc_holds_slot, the definition svc_start_run counts by too).
    `SELECT m.id AS machine_id, m.connected_instance AS instance, r.name AS runtime, r.kind, r.billing, r.models, r.busy, r.max_concurrent_jobs AS cap, r.limits,
            CASE WHEN r.max_concurrent_jobs IS NULL THEN 0 ELSE
              (SELECT count(*) FROM runs x WHERE x.machine_id = m.id AND x.runtime_name = r.name
                 AND svc_holds_slot(x.status, r.kind))::int END AS active
       FROM machines m JOIN runtimes r ON r.machine_id = m.id AND r.supported AND r.unavailable IS NULL
      WHERE m.app_id = $1 AND m.environment = $2::"Environment" AND m.end_user_id = $3
        AND m.revoked_at IS NULL AND ${machineOnlineSql("m", "$4")}
      ORDER BY r.busy, m.connected_at DESC`,
    [tenant.appId, tenant.environment, endUserId, since],
  );
}

function byPreference(a: Candidate, b: Candidate): number {
  // Under `user-hardware`, a model server before an agent CLI on a local model (`auto` means the app's own loop).
  if (a.kind !== b.kind) return a.kind === "model" ? -1 : 1;
  if (a.busy !== b.busy) return a.busy ? 1 : -1;
  const rank = (n: string) => (MODEL_RUNTIME_ORDER.indexOf(n) + 1 || MODEL_RUNTIME_ORDER.length + 1);
  return rank(a.runtime) - rank(b.runtime) || a.runtime.localeCompare(b.runtime);
}

/**
 * The model this runtime would run for `asked`, or undefined when it cannot:
 * `auto` takes its first model (an agent CLI its own default, null); `<runtime>/<model>`
 * names the runtime; a bare name must be one of its models (or, for an agent CLI, its name).
 */
export function modelServed(r: Pick<Candidate, "kind" | "runtime" | "models">, asked: string): string | null | undefined {
  const models = Array.isArray(r.models) ? r.models : [];
  if (asked === "auto") return r.kind === "agent" ? null : models[0];
  if (r.kind === "agent" && asked === r.runtime) return null;
  const slash = asked.indexOf("/");
  if (slash > 0 && asked.slice(0, slash) === r.runtime) {
    const m = asked.slice(slash + 1);
    return r.kind === "agent" ? m : models.includes(m) ? m : undefined;
  }
  return r.kind === "model" && models.includes(asked) ? asked : undefined;
}
