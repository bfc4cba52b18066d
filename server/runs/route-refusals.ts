import type { RouteKind, RuntimeKind } from "@svc/contract";
import type { Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { HEARTBEAT_TIMEOUT_SECONDS } from "../machines/machines.js";
import { machineOnlineSql } from "../machines/liveness.js";
import { runtimeCost, type Billing } from "../ledger/metering.js";
import type { RuntimeLimits } from "@svc/contract";
import { modelServed, spentWindow, windowWords, type FullRuntime } from "./routing.js";

/**
 * Why a run routes nowhere, in words that say what is true: the user has no
 * machine, their machines are offline (and since when), none serves the model
 * asked (and what they do serve), what serves it is on a route the request did
 * not ask for, or is a version the worker does not run. A busy machine is never
 * called offline: that is `busyReason`, answered `compute_busy`.
 */
export async function noRouteReason(sql: Sql, clock: Clock, tenant: Tenant, endUserId: string, user: string, model: string, prefer: RouteKind[]): Promise<string> {
  const now = clock.now().getTime();
  const machines = await sql.query<{ id: string; hostname: string; last_heartbeat_at: Date | null; connected: boolean }>(
    // Last seen: its last-seen write, or, when its instance stopped (died) holding it, when that instance was last alive.
    `SELECT id, hostname, GREATEST(COALESCE(last_heartbeat_at, connected_at), (SELECT si.alive_at FROM server_instances si WHERE si.id = machines.connected_instance)) AS last_heartbeat_at, ${machineOnlineSql("machines", "$4")} AS connected FROM machines
      WHERE app_id = $1 AND environment = $2::"Environment" AND end_user_id = $3 AND revoked_at IS NULL ORDER BY last_heartbeat_at DESC NULLS LAST`,
    [tenant.appId, tenant.environment, endUserId, new Date(now - HEARTBEAT_TIMEOUT_SECONDS * 1000)],
  );
  const models = `GET /v1/models?user=${encodeURIComponent(user)} lists what it can ask for`;
  if (machines.length === 0) return `${user} has no machine paired (pair one through the connect page: POST /v1/end_users/session gives its URL)`;
  const online = machines.filter((m) => m.connected);
  if (online.length === 0) {
    const last = machines[0];
    const seen = last.last_heartbeat_at ? `last seen ${ago(now - new Date(last.last_heartbeat_at).getTime())} ago (${last.hostname})` : `never connected (${last.hostname})`;
    return `none of ${user}'s ${machines.length} paired machine${machines.length === 1 ? " is" : "s is"} online: ${seen}; a run routes there once svc-worker start runs on it`;
  }
  const runtimes = await sql.query<{ machine_id: string; hostname: string; name: string; kind: RuntimeKind; billing: Billing | null; models: unknown; supported: boolean; note: string | null; unavailable: string | null; version: string | null; limits: RuntimeLimits | null }>(
    `SELECT r.machine_id, m.hostname, r.name, r.kind, r.billing, r.models, r.supported, r.note, r.unavailable, r.version, r.limits FROM runtimes r JOIN machines m ON m.id = r.machine_id
      WHERE r.machine_id = ANY($1::text[]) ORDER BY r.name`,
    [online.map((m) => m.id)],
  );
  const names = (r: (typeof runtimes)[number]) => (r.kind === "agent" ? [r.name] : (Array.isArray(r.models) ? (r.models as string[]) : []).map((m) => `${r.name}/${m}`));
  // The same rule routing applies (`modelServed`), on every runtime of the online machines, at its cap or not, supported or not.
  const serves = (r: (typeof runtimes)[number]) => modelServed({ kind: r.kind, runtime: r.name, models: Array.isArray(r.models) ? (r.models as string[]) : [] }, model) !== undefined;
  const matching = runtimes.filter(serves);
  const runs = (r: (typeof runtimes)[number]) => r.supported && !r.unavailable;
  if (matching.length && !matching.some(runs)) {
    // Found there, but it cannot run: say why (the machine's own words, which never hold its paths), and what fixes it.
    const each = matching.map((r) =>
      r.unavailable
        ? `${r.name} on ${user}'s ${r.hostname} cannot run there (${r.unavailable})${r.note ? `: ${r.note}` : ""}`
        : `${r.name} on ${user}'s ${r.hostname} is a version the worker does not run${r.version ? ` (${r.version})` : ""}${r.note ? `: ${r.note}` : ""}`,
    );
    return [...new Set(each)].join("; ");
  }
  const asked = prefer.filter((k) => k !== "app");
  // Everything that would serve it on the routes asked has spent its subscription's window: say which, and when it resets.
  const onRoute = matching.filter((r) => runs(r) && asked.includes(runtimeCost(r.kind, r.billing).route));
  const spent = onRoute.map((r) => ({ r, w: spentWindow(r.limits, clock.now()) }));
  if (onRoute.length && spent.every((s) => s.w)) {
    const each = spent.map(({ r, w }) => `${r.name} on ${user}'s ${r.hostname} has used its subscription's ${windowWords(w!.window)}; it resets at ${w!.until.toISOString()} (in ${ago(w!.until.getTime() - now)})`);
    return `${each.join("; ")}. Retry once it resets, ask for another runtime or route (route.prefer with \`app\` hands the run back to you), or ask the user to raise their plan`;
  }
  const elsewhere = matching.filter((r) => runs(r) && !asked.includes(runtimeCost(r.kind, r.billing).route));
  if (matching.length && elsewhere.length === matching.length) {
    const routes = [...new Set(elsewhere.map((r) => runtimeCost(r.kind, r.billing).route))].join(", ");
    return `what serves ${model} on ${user}'s machine (${elsewhere.map((r) => r.name).join(", ")}) is on route ${routes}, which this request does not ask for (${asked.join(", ") || "app only"})`;
  }
  const served = [...new Set(runtimes.filter(runs).flatMap(names))].sort();
  const cannot = [...new Set(runtimes.filter((r) => r.unavailable).map((r) => `${r.name} (${r.unavailable}${r.note ? `: ${r.note}` : ""})`))].join("; ");
  const also = cannot ? `; found there but unable to run: ${cannot}` : "";
  const online_ = `${user}'s machine${online.length === 1 ? ` ${online[0].hostname} is` : `s ${online.map((m) => m.hostname).join(", ")} are`} online`;
  if (served.length === 0) {
    if (cannot) return `${online_} but serve${online.length === 1 ? "s" : ""} nothing: ${cannot}`;
    return `${online_} but offer${online.length === 1 ? "s" : ""} no runtime (no model server found, and no agent CLI turned on in its owner's policy)`;
  }
  return `${online_} but none serves ${model}: ${online.length === 1 ? "it serves" : "they serve"} ${served.join(", ")} (${models}; an agent CLI is offered only when its owner turned it on: svc-worker policy set agents.<name> true)${also}`;
}

/** Why a run was refused `compute_busy`: which runtimes are full, at which cap, with how many runs already waiting. */
export function busyReason(user: string, full: FullRuntime[], queueBound: number): string {
  const each = full.map((f) => `${f.runtime} (its cap of ${f.cap} job${f.cap === 1 ? "" : "s"} running, ${f.waiting} run${f.waiting === 1 ? "" : "s"} waiting)`);
  return `${user}'s machine is online but busy: ${[...new Set(each)].join(", ")}; its queue holds at most ${queueBound} waiting run${queueBound === 1 ? "" : "s"} (RUN_QUEUE_PER_MACHINE)`;
}

function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172_800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86_400)} days`;
}
