import type { AllowanceUnit, Environment, RouteKind } from "@svc/contract";
import type { Sql, Tx } from "../db/open.js";
import type { CostClassValue } from "./metering.js";

/**
 * The SQL functions of prisma/functions/, called from TypeScript through one
 * typed wrapper each, in Postgres' named notation (`svc_start_run(p_id => $1, …)`):
 * an argument goes to the parameter named, never to a position.
 */

/**
 * The subscription statuses that entitle a user to their plan: the TypeScript
 * side's one list. The SQL side's one list is the function `svc_subscription_live`
 * (prisma/functions/svc_subscription_live.sql); test/sql-functions.test.ts checks
 * the two agree. SQL written in TypeScript calls the function (`subscriptionLiveSql`).
 */
export const LIVE_SUBSCRIPTION_STATUSES: readonly string[] = ["active", "trialing"];

/** `fn(p_a => expr, …)`: a call in named notation, each parameter given an SQL expression. */
function named(fn: string, args: Record<string, string>): string {
  return `${fn}(${Object.entries(args).map(([param, expr]) => `${param} => ${expr}`).join(", ")})`;
}

/** Runs one statement with `params`, on the database or inside a Prisma transaction. */
async function rows<T>(q: Sql | Tx, text: string, params: unknown[]): Promise<T[]> {
  return "$queryRawUnsafe" in q ? q.$queryRawUnsafe<T[]>(text, ...params) : q.query<T>(text, params, { prepared: true });
}

/** Binds `values` as `$1…$n` with their SQL types, in named notation. */
function bound(fn: string, values: Record<string, [value: unknown, type: string]>): { sql: string; params: unknown[] } {
  const entries = Object.entries(values);
  return {
    sql: named(fn, Object.fromEntries(entries.map(([param, [, type]], i) => [param, `$${i + 1}::${type}`]))),
    params: entries.map(([, [value]]) => value),
  };
}

/** What `svc_start_run` takes: the run to start and what its start is checked against. */
export interface StartRunArgs {
  runId: string;
  appId: string;
  environment: Environment;
  endUserId: string;
  source: string;
  model: string;
  request: unknown;
  /** The request's hash, to find a retry of it since `repeatSince` (null: no implicit retry window). */
  requestHash: string | null;
  repeatSince: Date;
  status: "queued" | "handed_back";
  routeKind: RouteKind;
  machineId: string | null;
  runtime: string | null;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  now: Date;
  costClass: CostClassValue;
  period: string;
  /** A route chosen in memory from the machines this instance holds, checked in the same statement (`svc_start_run`); none: routed from the rows. */
  routedHere?: RouteCheck;
}

/** What a route chosen in memory assumed, for `svc_start_run` to check under the user's lock. */
export interface RouteCheck {
  /** The instance that chose it (it holds the machine's connection). */
  instance: string;
  /** The chosen runtime's cap (null: none, its slots are not checked). */
  cap: number | null;
  /** It had a free slot (else: the run waits for one, its machine's queue below `queueBound`). */
  expectFree: boolean;
  queueBound: number;
}

/** What `svc_start_run` answers: the run started, a repeat found, or why nothing was run. */
export interface StartRunOutcome {
  outcome: "started" | "repeat" | "allowance_exhausted" | "spend_ceiling_reached" | "reroute";
  run_id: string | null;
  /** A reroute's reason: `machine_removed`, `machines_elsewhere`, `slots_changed`. */
  run_status: string | null;
  run_model: string | null;
  allowance: string | null;
  consumed: string | null;
  unit: string | null;
  ceiling: string | null;
  spend_period: string | null;
}

/** `svc_start_run`'s parameters for a start: each value with its SQL type. */
function startRunValues(a: StartRunArgs): Record<string, [value: unknown, type: string]> {
  return {
    p_id: [a.runId, "text"],
    p_app: [a.appId, "text"],
    p_env: [a.environment, `"Environment"`],
    p_user: [a.endUserId, "text"],
    p_source: [a.source, "text"],
    p_model: [a.model, "text"],
    p_request: [a.request, "jsonb"],
    p_hash: [a.requestHash, "text"],
    p_repeat_since: [a.repeatSince, "timestamptz"],
    p_status: [a.status, `"RunStatus"`],
    p_route: [a.routeKind, "text"],
    p_machine: [a.machineId, "text"],
    p_runtime: [a.runtime, "text"],
    p_lease_owner: [a.leaseOwner, "text"],
    p_lease_expires: [a.leaseExpiresAt, "timestamptz"],
    p_now: [a.now, "timestamptz"],
    p_cost: [a.costClass, `"CostClass"`],
    p_period: [a.period, "text"],
    p_routed_on: [a.routedHere?.instance ?? null, "text"],
    p_cap: [a.routedHere?.cap ?? null, "int"],
    p_expect_free: [a.routedHere?.expectFree ?? null, "boolean"],
    p_queue_bound: [a.routedHere?.queueBound ?? null, "int"],
  };
}

/** One round trip: the user's row locked, a retry found, the plan's allowance and spend ceiling checked, the run and its ledger row written. */
export async function startRun(db: Sql, a: StartRunArgs): Promise<StartRunOutcome> {
  const values = startRunValues(a);
  values.p_request[0] = JSON.stringify(a.request);
  const call = bound("svc_start_run", values);
  const [r] = await rows<StartRunOutcome>(db, `SELECT * FROM ${call.sql}`, call.params);
  return r;
}

/**
 * Many starts in one round trip (`svc_start_runs`), decided one after another in the order given, each as
 * `startRun` would decide it alone; the outcomes in the same order. On Postgres, give it one user's starts
 * (a statement then locks one user's row, as a single start does: two statements each locking several users'
 * rows could deadlock).
 */
export async function startRuns(db: Sql, starts: StartRunArgs[]): Promise<StartRunOutcome[]> {
  const json = starts.map((a, ord) => ({ ...Object.fromEntries(Object.entries(startRunValues(a)).map(([param, [value]]) => [param, value])), p_ord: ord }));
  const found = await rows<StartRunOutcome & { ord: number }>(db, `SELECT * FROM svc_start_runs($1::jsonb)`, [JSON.stringify(json)]);
  const byOrd = new Map(found.map(({ ord, ...r }) => [ord, r]));
  return starts.map((_, ord) => {
    const r = byOrd.get(ord);
    if (!r) throw new Error(`svc_start_runs answered no row for start ${ord} of ${starts.length}`);
    return r;
  });
}

/** The user and period a token overage is priced in, and the tokens to price. */
export interface OverageArgs {
  appId: string;
  environment: Environment;
  endUserId: string;
  period: string;
  tokens: number | bigint;
}

/** What `tokens` more cost the user past a tokens plan's allowance (micros; 0 on any other plan). Locks the user's row. */
export async function overageMicros(q: Sql | Tx, a: OverageArgs): Promise<bigint> {
  const call = bound("svc_overage_micros", {
    p_app: [a.appId, "text"],
    p_env: [a.environment, `"Environment"`],
    p_user: [a.endUserId, "text"],
    p_period: [a.period, "text"],
    p_tokens: [a.tokens, "bigint"],
  });
  const [r] = await rows<{ micros: bigint | number | string }>(q, `SELECT ${call.sql} AS micros`, call.params);
  return BigInt(r.micros);
}

/** `svc_overage_micros` inside a statement, each argument an SQL expression (e.g. the columns of a row being inserted). */
export function overageMicrosSql(e: { app: string; environment: string; user: string; period: string; tokens: string }): string {
  return named("svc_overage_micros", { p_app: e.app, p_env: e.environment, p_user: e.user, p_period: e.period, p_tokens: e.tokens });
}

/** The SQL expressions naming a user: app, environment (typed `"Environment"`), end user id. */
export interface UserSql {
  app: string;
  environment: string;
  user: string;
}

/** `svc_user_plan`: the id of the user's plan (their live subscription's, else the app's default; NULL: none). */
export function userPlanSql(e: UserSql): string {
  return named("svc_user_plan", { p_app: e.app, p_env: e.environment, p_user: e.user });
}

/** `svc_user_subscription`: the id of the subscription deciding the user's plan (NULL: the default plan). */
export function userSubscriptionSql(e: UserSql): string {
  return named("svc_user_subscription", { p_app: e.app, p_env: e.environment, p_user: e.user });
}

/** `svc_subscription_live`: true when a subscription of this status entitles its user. */
export function subscriptionLiveSql(status: string): string {
  return named("svc_subscription_live", { p_status: status });
}

/** A user's plan window now and what it holds (`svc_user_usage`); the numbers as Postgres returns BIGINTs. */
export interface UserUsage {
  /** The window's name: the month (`2026-11`), or the year (`2026`) of a yearly plan. */
  period: string;
  usage_window: string;
  unit: AllowanceUnit;
  runs: string | number | bigint;
  input_tokens: string | number | bigint;
  output_tokens: string | number | bigint;
  cache_read_tokens: string | number | bigint;
  cache_write_tokens: string | number | bigint;
  amount_micros: string | number | bigint;
  /** The usage counted against the plan's allowance, in `unit`. */
  used: string | number | bigint;
}

/** The user's plan window holding `period` (the month now) and its sums, by the rules the run start applies. */
export async function userUsage(db: Sql, a: { appId: string; environment: Environment; endUserId: string; period: string }): Promise<UserUsage> {
  const call = bound("svc_user_usage", {
    p_app: [a.appId, "text"],
    p_env: [a.environment, `"Environment"`],
    p_user: [a.endUserId, "text"],
    p_period: [a.period, "text"],
  });
  const [r] = await rows<UserUsage>(db, `SELECT * FROM ${call.sql}`, call.params);
  return r;
}

