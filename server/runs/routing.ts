import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { HEARTBEAT_TIMEOUT_SECONDS } from "../machines/machines.js";
import type { RouteKind, RuntimeKind } from "@svc/contract";
import { costClassOf, runtimeCost, type Billing, type CostClassValue } from "../ledger/metering.js";

/** Where a run goes: a runtime on one of the user's machines, or back to the app. */
export type Route =
  | { kind: Exclude<RouteKind, "app">; costClass: CostClassValue; machineId: string; instance: string; runtime: string; runtimeKind: RuntimeKind; billing: Billing | null; model: string | null }
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
}

/**
 * Picks the compute for a run among the user's reachable runtimes: one that
 * serves the model asked for. Route kinds are tried in
 * the order asked; null when nothing fits and `app` is not allowed.
 */
export async function chooseRoute(sql: Sql, clock: Clock, tenant: Tenant, endUserId: string, model: string, prefer: RouteKind[]): Promise<Route | null> {
  const rows = await reachableRuntimes(sql, clock, tenant, endUserId);
  for (const kind of prefer) {
    if (kind === "app") return { kind: "app", costClass: costClassOf("app") };
    // A runtime at its advertised cap is busy for good: the run goes elsewhere (or back to the app).
    const fits = rows.filter((r) => runtimeCost(r.kind, r.billing).route === kind && (r.cap === null || r.active < r.cap)).sort(byPreference);
    for (const r of fits) {
      const served = modelServed(r, model);
      if (served !== undefined) {
        const cost = runtimeCost(r.kind, r.billing);
        return { kind, costClass: cost.costClass, machineId: r.machine_id, instance: r.instance, runtime: r.runtime, runtimeKind: r.kind, billing: cost.billing, model: served };
      }
    }
  }
  return null;
}

/**
 * The runtimes a run of this user could reach now: only machines of this user,
 * of this app and environment, not removed, connected with a heartbeat inside
 * the timeout. Idle runtimes and the freshest machines first.
 */
export async function reachableRuntimes(sql: Sql, clock: Clock, tenant: Tenant, endUserId: string): Promise<Candidate[]> {
  const since = new Date(clock.now().getTime() - HEARTBEAT_TIMEOUT_SECONDS * 1000);
  return sql.query<Candidate>(
    // Active: queued or running (a job on the machine or about to be); a model run waiting for the app's answers holds none, an agent CLI waiting for a permission does.
    `SELECT m.id AS machine_id, m.connected_instance AS instance, r.name AS runtime, r.kind, r.billing, r.models, r.busy, r.max_concurrent_jobs AS cap,
            CASE WHEN r.max_concurrent_jobs IS NULL THEN 0 ELSE
              (SELECT count(*) FROM runs x WHERE x.machine_id = m.id AND x.runtime_name = r.name
                 AND (x.status IN ('queued', 'running') OR (x.status = 'waiting' AND r.kind = 'agent')))::int END AS active
       FROM machines m JOIN runtimes r ON r.machine_id = m.id AND r.supported
      WHERE m.app_id = $1 AND m.environment = $2::"Environment" AND m.end_user_id = $3
        AND m.revoked_at IS NULL AND m.connected_instance IS NOT NULL AND m.last_heartbeat_at > $4
      ORDER BY r.busy, m.last_heartbeat_at DESC`,
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
function modelServed(r: Candidate, asked: string): string | null | undefined {
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
