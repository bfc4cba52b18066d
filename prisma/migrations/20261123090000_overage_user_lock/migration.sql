-- Overage of a tokens plan is priced under the user's row lock, like a run's start
-- (hand-written; issue 14). Before, svc_overage_micros was STABLE and read the user's
-- tokens with the calling statement's snapshot: turns of one user's runs written at the
-- same moment each priced their tokens from the same total, so the tokens past the
-- allowance were under-billed. Now, on a tokens plan with overage (the only case whose
-- price depends on the total), it locks the user's row (`end_users ... FOR UPDATE`, the
-- lock svc_start_run takes) before reading the total, and, VOLATILE, reads it with a fresh
-- snapshot: a concurrent writer of the same user waits until the first one committed its
-- row, then counts it. The lock is held until the caller's transaction ends (the token
-- row's statement in the run store; the usage report's transaction), after its row is
-- written. Body otherwise unchanged (20261122211500_user_plan_function).
CREATE OR REPLACE FUNCTION "svc_overage_micros"(p_app TEXT, p_env "Environment", p_user TEXT, p_period TEXT, p_tokens BIGINT)
RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  plan RECORD;
  used BIGINT;
  v_window TEXT := p_period;
BEGIN
  IF p_tokens <= 0 THEN RETURN 0; END IF;
  SELECT p.allowance_unit::text AS unit, p.allowance, p.overage, p.overage_price_micros AS price, p.period INTO plan FROM plans p
   WHERE p.id = svc_user_plan(p_app, p_env, p_user);
  IF NOT FOUND OR plan.unit <> 'tokens' OR NOT plan.overage OR plan.allowance IS NULL OR COALESCE(plan.price, 0) = 0 THEN RETURN 0; END IF;
  PERFORM 1 FROM end_users WHERE id = p_user FOR UPDATE;
  IF plan.period = 'year' THEN v_window := left(p_period, 4) || '-%'; END IF;
  SELECT COALESCE(sum(u.input_tokens + u.output_tokens), 0) INTO used FROM usage_rows u
   WHERE u.app_id = p_app AND u.environment = p_env AND u.end_user_id = p_user AND u.period LIKE v_window;
  RETURN GREATEST(0, LEAST(p_tokens, used + p_tokens - plan.allowance)) * plan.price / 1000;
END;
$$;
