import { api, call } from "./client";

/** The statuses of a run that has not ended. */
export const ACTIVE_RUN_STATUSES: ReadonlySet<string> = new Set(["queued", "running", "waiting", "paused"]);

/** One run inspected: the same cache entry for the inspector and for "Find a run". */
export const runQuery = (app: string, env: "test" | "live", id: string) => ({
  queryKey: ["owner", app, env, "run", id] as const,
  queryFn: () => call(api.ownerGetRun({ params: { app, env, id } })),
});

/**
 * The run an id names, as the owner pasted it: a run id (`run_...`), or a response id (`resp_...`: a
 * response is a run, `resp_X` is `run_X`). Null: not such an id.
 */
export function runIdOf(text: string): string | null {
  const m = /^(run|resp)_([A-Za-z0-9]{1,60})$/.exec(text.trim());
  return m ? `run_${m[2]}` : null;
}

/** The service's own model: answered by the service, never routed to anyone's machine. */
const ECHO_MODEL = "svc/echo";

/**
 * Where a run went, in the same words on the runs list and on the run's page: its route, and its cost class
 * when that is not the route's own name (`user-hardware`; `app, app_served`; `service, free`). A chat completion
 * or a response on `svc/echo` is answered at once by the service and its record names no route: it went where
 * every `svc/echo` run goes (`service, free`). Else, with no route: `not routed yet` while it waits, `not routed`
 * once it has ended without one.
 */
export function routeLabel(run: { route: string | null; costClass: string | null; model: string; status: string }): string {
  if (run.route) return run.costClass && run.costClass !== run.route.replaceAll("-", "_") ? `${run.route}, ${run.costClass}` : run.route;
  if (run.model === ECHO_MODEL) return "service, free";
  return ACTIVE_RUN_STATUSES.has(run.status) ? "not routed yet" : "not routed";
}
