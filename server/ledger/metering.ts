import type { Prisma } from "../db/open.js";

/**
 * The ledger's common terms. A run's start (its plan, its allowance, its count)
 * is decided in one SQL call, `svc_start_run` (migration 20261122184500), which
 * `RunService.begin` makes.
 */

/** A Prisma transaction client (inside `$transaction`). */
export type Tx = Parameters<Parameters<Prisma["$transaction"]>[0]>[0];

export type CostClassValue = "user_hardware" | "user_subscription" | "app_served" | "free";

/**
 * Who serves a piece of work, as far as the ledger is concerned: one of the
 * route kinds (`user-hardware`, `user-subscription`, `app`) or the service itself
 * (`service`: `svc/echo`).
 */
export type CostRoute = "user-hardware" | "user-subscription" | "app" | "service";

/**
 * The cost class of a ledger row: the service's decision, from the route and,
 * on the user's machine, the kind of runtime that serves it. Never what a worker
 * advertises (a machine saying `free` is still the user's hardware). The one place
 * the cost class is decided: routing, the run start, token rows, run reads and the
 * compute reads all take it from here.
 *
 * - a model runtime on the user's machine: `user_hardware`;
 * - an agent CLI on the user's machine (the user's own subscription): `user_subscription`;
 * - a handback to the app (`serve_in_app`): `app_served`;
 * - the service answering itself (`svc/echo`): `free`.
 *
 * Without a runtime kind the route decides (a `user-hardware` route only ever
 * takes a model runtime, a `user-subscription` route an agent one).
 */
export function costClassOf(route: CostRoute, runtimeKind?: "model" | "agent" | null): CostClassValue {
  switch (route) {
    case "app":
      return "app_served";
    case "service":
      return "free";
    case "user-hardware":
    case "user-subscription":
      if (runtimeKind === "agent") return "user_subscription";
      if (runtimeKind === "model") return "user_hardware";
      return route === "user-subscription" ? "user_subscription" : "user_hardware";
  }
}

/** The cost class work on this kind of runtime of the user's own machine is recorded with. */
export function costClassOfRuntime(kind: "model" | "agent"): CostClassValue {
  return costClassOf(kind === "agent" ? "user-subscription" : "user-hardware", kind);
}

/** The plan period a moment falls in: calendar months (UTC) until plans set their own periods. */
export function periodOf(at: Date): string {
  return at.toISOString().slice(0, 7);
}
