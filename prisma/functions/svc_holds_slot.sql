-- Whether a run counts against its runtime's job cap (`max_concurrent_jobs`): queued or running (a job on the
-- machine or about to be); waiting, only for an agent CLI (its job stays on the machine while it waits for a
-- permission), not for a model run (waiting for the app's answers, it holds no job). The one definition, used by
-- routing (`server/runs/routing.ts`, `reachableRuntimes`) and by `svc_start_run`'s check of the slots.
-- A simple SQL function: Postgres inlines it into the queries that call it. Written as "one of the three active
-- statuses, and waiting only for an agent" (not as an OR of the two cases) so that the inlined status list is a
-- condition of its own, which the index on runs (machine_id, runtime_name, status) takes: a count reads the
-- runtime's active runs only, not every active run of every machine, nor every run the machine ever had.
CREATE OR REPLACE FUNCTION "svc_holds_slot"(p_status "RunStatus", p_kind "RuntimeKind")
RETURNS BOOLEAN LANGUAGE sql IMMUTABLE AS $$
  SELECT p_status IN ('queued', 'running', 'waiting') AND (p_status <> 'waiting' OR p_kind = 'agent')
$$;
