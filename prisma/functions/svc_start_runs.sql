-- Many runs' starts in one statement, in the order given: each exactly as svc_start_run decides it (a VOLATILE
-- function: each call sees the runs and ledger rows the calls before it inserted, so starts of one user in one
-- statement count each other against the plan as separate statements would), in the order of their `p_ord`.
-- Answers one row per start, with its `ord`. The caller keeps each statement to one user's starts on a database where
-- statements run side by side, so a statement locks one user's row, as a single start does.
-- Starts routed to the same runtime in a row (one user's burst, the usual batch) count its active runs once: the
-- first of them counts under the user's lock, each start made adds its own run, and svc_start_run is given that
-- figure instead of counting again (1,000 running runs took ≈ 2 ms a count). A run that ends meanwhile is still in
-- the figure: a start may be sent to route again from the rows when the runtime was one short of its cap, never
-- past it.
CREATE OR REPLACE FUNCTION "svc_start_runs"(p_starts JSONB)
RETURNS TABLE (ord INT, outcome TEXT, run_id TEXT, run_status TEXT, run_model TEXT, allowance BIGINT, consumed BIGINT, unit TEXT, ceiling BIGINT, spend_period TEXT)
LANGUAGE plpgsql AS $$
DECLARE
  s RECORD;
  res RECORD;
  c_machine TEXT;
  c_runtime TEXT;
  c_kind "RuntimeKind";
  c_active BIGINT;
  v_active BIGINT;
BEGIN
  FOR s IN SELECT * FROM jsonb_to_recordset(p_starts) AS x(
      p_id TEXT, p_app TEXT, p_env "Environment", p_user TEXT, p_source TEXT, p_model TEXT, p_request JSONB,
      p_hash TEXT, p_repeat_since TIMESTAMPTZ, p_status "RunStatus", p_route TEXT, p_machine TEXT, p_runtime TEXT,
      p_lease_owner TEXT, p_lease_expires TIMESTAMPTZ, p_now TIMESTAMPTZ, p_cost "CostClass", p_period TEXT,
      p_routed_on TEXT, p_cap INT, p_expect_free BOOLEAN, p_queue_bound INT, p_ord INT)
    ORDER BY x.p_ord
  LOOP
    v_active := NULL;
    IF s.p_routed_on IS NOT NULL AND s.p_cap IS NOT NULL AND s.p_expect_free THEN
      IF c_machine IS DISTINCT FROM s.p_machine OR c_runtime IS DISTINCT FROM s.p_runtime THEN
        -- Counted under the user's lock, as svc_start_run counts (it takes the lock again: held already).
        PERFORM 1 FROM end_users WHERE id = s.p_user FOR NO KEY UPDATE;
        c_machine := s.p_machine;
        c_runtime := s.p_runtime;
        SELECT r.kind INTO c_kind FROM runtimes r WHERE r.machine_id = s.p_machine AND r.name = s.p_runtime;
        c_active := svc_runtime_slots_taken(s.p_machine, s.p_runtime);
      END IF;
      v_active := c_active;
    END IF;
    SELECT * INTO res FROM svc_start_run(
      s.p_id, s.p_app, s.p_env, s.p_user, s.p_source, s.p_model, s.p_request,
      s.p_hash, s.p_repeat_since, s.p_status, s.p_route, s.p_machine, s.p_runtime,
      s.p_lease_owner, s.p_lease_expires, s.p_now, s.p_cost, s.p_period,
      s.p_routed_on, s.p_cap, s.p_expect_free, s.p_queue_bound, v_active);
    -- A run started on the runtime counted holds one of its slots from now on.
    IF res.outcome = 'started' AND c_machine IS NOT DISTINCT FROM s.p_machine AND c_runtime IS NOT DISTINCT FROM s.p_runtime AND svc_holds_slot(s.p_status, c_kind) THEN
      c_active := c_active + 1;
    END IF;
    ord := s.p_ord;
    outcome := res.outcome;
    run_id := res.run_id;
    run_status := res.run_status;
    run_model := res.run_model;
    allowance := res.allowance;
    consumed := res.consumed;
    unit := res.unit;
    ceiling := res.ceiling;
    spend_period := res.spend_period;
    RETURN NEXT;
  END LOOP;
END;
$$;
