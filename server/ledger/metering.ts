/**
 * The ledger's common terms. A run's start (its plan, its allowance, its count)
 * is decided in one SQL call, `svc_start_run` (migration 20261122184500), which
 * `RunService.begin` makes.
 */

export type CostClassValue = "user_hardware" | "user_subscription" | "app_served" | "free";

/**
 * Who serves a piece of work, as far as the ledger is concerned: one of the
 * route kinds (`user-hardware`, `user-subscription`, `app`) or the service itself
 * (`service`: `svc/echo`).
 */
export type CostRoute = "user-hardware" | "user-subscription" | "app" | "service";

/**
 * The cost class of a ledger row: the service's decision, from the route. Never
 * what a worker advertises (a machine saying `free` is still the user's hardware).
 * The one place the cost class is decided: routing, the run start, token rows,
 * run reads and the compute reads all take it from here.
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
export type Billing = "subscription" | "api_key" | "local_model";

/** The route a runtime of the user's machine serves under: model servers and agent CLIs on a local model are the user's hardware; other agent CLIs, their subscription. */
export function routeOfRuntime(kind: "model" | "agent", billing: Billing | null | undefined): "user-hardware" | "user-subscription" {
  return kind === "model" || billing === "local_model" ? "user-hardware" : "user-subscription";
}

/** The cost class work on this runtime of the user's own machine is recorded with. */
export function costClassOfRuntime(kind: "model" | "agent", billing: Billing | null | undefined): CostClassValue {
  return costClassOf(routeOfRuntime(kind, billing));
}

/** The plan period a moment falls in: calendar months (UTC) until plans set their own periods. */
export function periodOf(at: Date): string {
  return at.toISOString().slice(0, 7);
}
