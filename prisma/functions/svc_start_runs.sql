-- Many runs' starts in one statement, in the order given: each exactly as svc_start_run decides it (a VOLATILE
-- function: each call sees the runs and ledger rows the calls before it inserted, so starts of one user in one
-- statement count each other against the plan as separate statements would), in the order of their `p_ord`.
-- Answers one row per start, with its `ord`. The caller keeps each statement to one user's starts on a database where
-- statements run side by side, so a statement locks one user's row, as a single start does.
CREATE OR REPLACE FUNCTION "svc_start_runs"(p_starts JSONB)
RETURNS TABLE (ord INT, outcome TEXT, run_id TEXT, run_status TEXT, run_model TEXT, allowance BIGINT, consumed BIGINT, unit TEXT, ceiling BIGINT, spend_period TEXT)
LANGUAGE plpgsql AS $$
DECLARE
  s RECORD;
BEGIN
  FOR s IN SELECT * FROM jsonb_to_recordset(p_starts) AS x(
      p_id TEXT, p_app TEXT, p_env "Environment", p_user TEXT, p_source TEXT, p_model TEXT, p_request JSONB,
      p_hash TEXT, p_repeat_since TIMESTAMPTZ, p_status "RunStatus", p_route TEXT, p_machine TEXT, p_runtime TEXT,
      p_lease_owner TEXT, p_lease_expires TIMESTAMPTZ, p_now TIMESTAMPTZ, p_cost "CostClass", p_period TEXT,
      p_routed_on TEXT, p_cap INT, p_expect_free BOOLEAN, p_queue_bound INT, p_ord INT)
    ORDER BY x.p_ord
  LOOP
    RETURN QUERY SELECT s.p_ord, r.* FROM svc_start_run(
      s.p_id, s.p_app, s.p_env, s.p_user, s.p_source, s.p_model, s.p_request,
      s.p_hash, s.p_repeat_since, s.p_status, s.p_route, s.p_machine, s.p_runtime,
      s.p_lease_owner, s.p_lease_expires, s.p_now, s.p_cost, s.p_period,
      s.p_routed_on, s.p_cap, s.p_expect_free, s.p_queue_bound) r;
  END LOOP;
END;
$$;
