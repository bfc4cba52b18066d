import type { CostClass, RouteKind, RunRoute, RuntimeBilling, RuntimeKind } from "@svc/contract";

/**
 * The ledger's common terms. A run's start (its plan, its allowance, its count)
 * is decided in one SQL call, `svc_start_run` (prisma/functions/svc_start_run.sql), which
 * `RunService.begin` makes.
 */

export type CostClassValue = CostClass;

/**
 * Who serves a piece of work, as far as the ledger is concerned: one of the
 * route kinds (`user-hardware`, `user-subscription`, `app`) or the service itself
 * (`service`: `svc/echo`).
 */
export type CostRoute = RunRoute;

/**
 * The cost class of a ledger row: the service's decision, from the route. Never
 * what a worker advertises (a machine saying `free` is still the user's hardware).
 * The one place the cost class is decided: routing, the run start, token rows,
 * run reads and the compute reads all take it from here (a runtime's through
 * runtimeCost).
 *
 * - `user-hardware` (a model runtime on the user's machine, or an agent CLI on the
 *   user's own local model): `user_hardware`;
 * - `user-subscription` (an agent CLI on the user's subscription, or on a provider
 *   key the user let it use): `user_subscription`;
 * - a handback to the app (`serve_in_app`): `app_served`;
 * - the service answering itself (`svc/echo`): `free`.
 */
export function costClassOf(route: CostRoute): CostClassValue {
  switch (route) {
    case "app":
      return "app_served";
    case "service":
      return "free";
    case "user-hardware":
      return "user_hardware";
    case "user-subscription":
      return "user_subscription";
  }
}

/** What pays for an agent CLI's model (null for a model runtime). */
export type Billing = RuntimeBilling;

/**
 * How work on a runtime of the user's own machine is served and counted: the
 * one place a runtime's route and cost class are decided (the runtime's view
 * and stored advert, routing, and through the route the run start and its rows).
 *
 * - `billing`: what pays for an agent CLI's model, as its advert says
 *   (`subscription` when it says nothing); null for a model runtime;
 * - `route`: model servers, and agent CLIs on a local model, are the user's
 *   hardware; other agent CLIs, their subscription;
 * - `costClass`: the route's (costClassOf).
 */
export function runtimeCost(
  kind: RuntimeKind,
  advertised: Billing | null | undefined,
): { billing: Billing | null; route: Exclude<RouteKind, "app">; costClass: CostClassValue } {
  const billing = kind === "agent" ? (advertised ?? "subscription") : null;
  const route = kind === "model" || billing === "local_model" ? "user-hardware" : "user-subscription";
  return { billing, route, costClass: costClassOf(route) };
}

/** The plan period a moment falls in: calendar months (UTC) until plans set their own periods. */
export function periodOf(at: Date): string {
  return at.toISOString().slice(0, 7);
}
