-- How many of a runtime's runs hold one of its slots (svc_holds_slot): what a start checks against the runtime's cap,
-- under its user's lock. The one count for svc_start_run and for svc_start_runs, which counts once per batch and
-- gives svc_start_run the figure. PL/pgSQL, so each session keeps the plan (a SQL function with a FROM is not
-- inlined, and was planned at every call).
CREATE OR REPLACE FUNCTION "svc_runtime_slots_taken"(p_machine TEXT, p_runtime TEXT)
RETURNS BIGINT LANGUAGE plpgsql AS $$
BEGIN
  RETURN (SELECT count(*) FROM runs x JOIN runtimes r ON r.machine_id = x.machine_id AND r.name = x.runtime_name
           WHERE x.machine_id = p_machine AND x.runtime_name = p_runtime AND svc_holds_slot(x.status, r.kind));
END;
$$;
