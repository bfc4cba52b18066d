CREATE OR REPLACE FUNCTION "svc_start_run"(
  p_id TEXT, p_app TEXT, p_env "Environment", p_user TEXT, p_source TEXT, p_model TEXT, p_request JSONB,
  p_hash TEXT, p_repeat_since TIMESTAMPTZ, p_status "RunStatus", p_route TEXT, p_machine TEXT, p_runtime TEXT,
  p_lease_owner TEXT, p_lease_expires TIMESTAMPTZ, p_now TIMESTAMPTZ, p_cost "CostClass", p_period TEXT,
  p_routed_on TEXT, p_cap INT, p_expect_free BOOLEAN, p_queue_bound INT,
  -- The runtime's runs holding a slot as the caller counted them, in this transaction and under this user's lock (a
  -- batch of starts, svc_start_runs, counts once and adds its own); NULL: counted here.
  p_active BIGINT DEFAULT NULL
) RETURNS TABLE (outcome TEXT, run_id TEXT, run_status TEXT, run_model TEXT, allowance BIGINT, consumed BIGINT, unit TEXT, ceiling BIGINT, spend_period TEXT)
LANGUAGE plpgsql AS $$
DECLARE
  same RECORD;
  plan RECORD;
  used BIGINT := 0;
  spent BIGINT;
  win RECORD;
  has_plan BOOLEAN;
  v_ceiling BIGINT;
  v_amount BIGINT := 0;
  v_window TEXT := p_period;
  request JSONB := p_request;
  slots_changed BOOLEAN := false;
BEGIN
  -- The user's row, locked against the user's other starts and overage pricing (which take the same lock). NO KEY
  -- UPDATE, not UPDATE: rows naming the user (another run's ledger rows, written meanwhile) check their key without
  -- waiting for this start to commit.
  PERFORM 1 FROM end_users WHERE id = p_user FOR NO KEY UPDATE;
  -- The machine chosen must still be this user's and not removed (on any instance): a run never reaches a machine its user removed.
  IF p_machine IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM machines m WHERE m.id = p_machine AND m.app_id = p_app AND m.environment = p_env AND m.end_user_id = p_user AND m.revoked_at IS NULL
  ) THEN
    RETURN QUERY SELECT 'reroute'::text, NULL::text, 'machine_removed'::text, NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, NULL::text;
    RETURN;
  END IF;
  -- Routed in memory on instance p_routed_on, from the machines it holds: right only while the user has no
  -- machine held anywhere else, the one chosen is held there, and its runtime's slots are as that instance saw
  -- them (under the user's lock, so concurrent starts count each other). Else the caller routes from the rows.
  IF p_routed_on IS NOT NULL THEN
    IF EXISTS (
      SELECT 1 FROM machines m WHERE m.app_id = p_app AND m.environment = p_env AND m.end_user_id = p_user AND m.revoked_at IS NULL
         AND m.connected_instance IS NOT NULL AND m.connected_instance <> p_routed_on
    ) OR (p_machine IS NOT NULL AND NOT EXISTS (SELECT 1 FROM machines m WHERE m.id = p_machine AND m.connected_instance = p_routed_on)) THEN
      RETURN QUERY SELECT 'reroute'::text, NULL::text, 'machines_elsewhere'::text, NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, NULL::text;
      RETURN;
    END IF;
    -- Active as routing counts them (svc_holds_slot). Two conditions, not one with both counts: PL/pgSQL keeps a
    -- plan for each, where the one expression was planned again at every call (its custom plan, which drops the
    -- branch not taken, always looked cheaper than a generic one: 0.25 ms of planning a start).
    IF p_cap IS NOT NULL AND p_expect_free THEN
      slots_changed := COALESCE(p_active, svc_runtime_slots_taken(p_machine, p_runtime)) >= p_cap;
    ELSIF p_cap IS NOT NULL THEN
      slots_changed := (SELECT COALESCE(sum(GREATEST(a.n - r.max_concurrent_jobs, 0)), 0) FROM runtimes r,
             LATERAL (SELECT count(*) AS n FROM runs x WHERE x.machine_id = r.machine_id AND x.runtime_name = r.name
                        AND svc_holds_slot(x.status, r.kind)) a
           WHERE r.machine_id = p_machine AND r.max_concurrent_jobs IS NOT NULL) >= p_queue_bound;
    END IF;
    IF slots_changed THEN
      RETURN QUERY SELECT 'reroute'::text, NULL::text, 'slots_changed'::text, NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, NULL::text;
      RETURN;
    END IF;
  END IF;
  IF p_hash IS NOT NULL THEN
    -- A run that failed or was cancelled served nothing: a retry of it is a new run.
    SELECT r.id, r.status::text AS status, r.model INTO same FROM runs r
     WHERE r.app_id = p_app AND r.environment = p_env AND r.request_hash = p_hash AND r.created_at > p_repeat_since
       AND r.status NOT IN ('failed', 'cancelled')
     ORDER BY r.created_at DESC LIMIT 1;
    IF FOUND THEN
      RETURN QUERY SELECT 'repeat'::text, same.id, same.status, same.model, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, NULL::text;
      RETURN;
    END IF;
  END IF;
  -- The user's plan (svc_user_plan).
  SELECT p.allowance_unit::text AS unit, p.allowance, p.overage, p.overage_price_micros, p.spend_ceiling_micros, p.period INTO plan FROM plans p
   WHERE p.id = svc_user_plan(p_app, p_env, p_user);
  has_plan := FOUND;
  -- The plan's window (svc_plan_window) and what it holds (svc_usage_window), read when the plan limits something.
  IF has_plan THEN v_window := svc_plan_window(plan.period, p_period); END IF;
  IF has_plan AND (plan.allowance IS NOT NULL OR plan.spend_ceiling_micros IS NOT NULL) THEN
    SELECT w.used, w.amount_micros INTO win FROM svc_usage_window(p_app, p_env, p_user, v_window, plan.unit) w;
  END IF;
  IF has_plan AND plan.allowance IS NOT NULL THEN
    used := win.used;
    IF used >= plan.allowance AND NOT plan.overage THEN
      RETURN QUERY SELECT 'allowance_exhausted'::text, NULL::text, NULL::text, NULL::text, plan.allowance, used, plan.unit, NULL::bigint, v_window;
      RETURN;
    END IF;
    IF used >= plan.allowance AND plan.unit = 'runs' THEN v_amount := COALESCE(plan.overage_price_micros, 0); END IF;
  END IF;
  IF has_plan AND plan.spend_ceiling_micros IS NOT NULL THEN
    v_ceiling := plan.spend_ceiling_micros;
    spent := win.amount_micros;
    IF spent + v_amount > v_ceiling OR spent >= v_ceiling THEN
      RETURN QUERY SELECT 'spend_ceiling_reached'::text, NULL::text, NULL::text, NULL::text, NULL::bigint, spent, NULL::text, v_ceiling, NULL::text;
      RETURN;
    END IF;
    -- The driver checks the plan's spend ceiling between turns, over the same window.
    request := request || jsonb_build_object('spendCeilingMicros', v_ceiling::text, 'spendPeriod', v_window);
  END IF;
  INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, request_hash, status, route_kind, machine_id, runtime_name,
                    lease_owner, lease_expires_at, created_at, finished_at)
  VALUES (p_id, p_app, p_env, p_user, p_source, p_model, request, p_hash, p_status, p_route, p_machine, p_runtime,
          p_lease_owner, p_lease_expires, p_now, CASE WHEN p_status = 'handed_back' THEN p_now END);
  INSERT INTO usage_rows (app_id, environment, end_user_id, run_id, cost_class, kind, amount_micros, period, unique_key, created_at)
  VALUES (p_app, p_env, p_user, p_id, p_cost, 'run', v_amount, p_period, 'run:' || p_id, p_now);
  RETURN QUERY SELECT 'started'::text, p_id, p_status::text, p_model,
    CASE WHEN has_plan THEN plan.allowance END, CASE WHEN has_plan AND plan.unit = 'runs' THEN used + 1 ELSE used END,
    CASE WHEN has_plan THEN plan.unit END, v_ceiling, v_window;
END;
$$;
