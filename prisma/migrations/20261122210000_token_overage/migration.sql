-- Overage of a tokens plan, priced where its rows are written (hand-written, like svc_start_run).
-- What `p_tokens` more tokens cost the user in the window of `p_period`: on a tokens plan
-- with overage and an overage price, the part of them past the allowance, at the price per
-- 1,000 tokens (rounded down to the micro); 0 on any other plan. The plan is the user's
-- live subscription's (one bought through Stripe first), else the app's default one, as at
-- a run's start. Rows already committed count; rows being written by another statement at
-- the same moment do not (a race can only under-price, never count a token twice).
CREATE FUNCTION "svc_overage_micros"(p_app TEXT, p_env "Environment", p_user TEXT, p_period TEXT, p_tokens BIGINT)
RETURNS BIGINT LANGUAGE plpgsql STABLE AS $$
DECLARE
  plan RECORD;
  used BIGINT;
  v_window TEXT := p_period;
BEGIN
  IF p_tokens <= 0 THEN RETURN 0; END IF;
  SELECT p.allowance_unit::text AS unit, p.allowance, p.overage, p.overage_price_micros AS price, p.period INTO plan FROM plans p
   WHERE p.id = COALESCE(
     (SELECT s.plan_id FROM subscriptions s
       WHERE s.app_id = p_app AND s.environment = p_env AND s.end_user_id = p_user AND s.status IN ('active', 'trialing')
       ORDER BY (s.source = 'stripe') DESC, s.created_at DESC LIMIT 1),
     (SELECT d.id FROM plans d WHERE d.app_id = p_app AND d.environment = p_env AND d.is_default AND d.archived_at IS NULL ORDER BY d.created_at LIMIT 1));
  IF NOT FOUND OR plan.unit <> 'tokens' OR NOT plan.overage OR plan.allowance IS NULL OR COALESCE(plan.price, 0) = 0 THEN RETURN 0; END IF;
  IF plan.period = 'year' THEN v_window := left(p_period, 4) || '-%'; END IF;
  SELECT COALESCE(sum(u.input_tokens + u.output_tokens), 0) INTO used FROM usage_rows u
   WHERE u.app_id = p_app AND u.environment = p_env AND u.end_user_id = p_user AND u.period LIKE v_window;
  RETURN GREATEST(0, LEAST(p_tokens, used + p_tokens - plan.allowance)) * plan.price / 1000;
END;
$$;
