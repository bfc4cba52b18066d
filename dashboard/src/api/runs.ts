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
