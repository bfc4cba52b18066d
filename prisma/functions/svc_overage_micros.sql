CREATE OR REPLACE FUNCTION "svc_overage_micros"(p_app TEXT, p_env "Environment", p_user TEXT, p_period TEXT, p_tokens BIGINT)
RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  plan RECORD;
  used BIGINT;
BEGIN
  IF p_tokens <= 0 THEN RETURN 0; END IF;
  -- Nothing to price unless a plan of the app prices tokens past its allowance (archived ones too: a subscription may
  -- still hold one). Most apps have none, and every model turn's ledger row asks: this look at the app's plans, on
  -- their (app, environment) index, costs a fraction of finding the user's plan (svc_user_plan and its subscription).
  IF NOT EXISTS (SELECT 1 FROM plans p WHERE p.app_id = p_app AND p.environment = p_env AND p.allowance_unit = 'tokens' AND p.overage
                  AND p.allowance IS NOT NULL AND COALESCE(p.overage_price_micros, 0) <> 0) THEN
    RETURN 0;
  END IF;
  SELECT p.allowance_unit::text AS unit, p.allowance, p.overage, p.overage_price_micros AS price, p.period INTO plan FROM plans p
   WHERE p.id = svc_user_plan(p_app, p_env, p_user);
  IF NOT FOUND OR plan.unit <> 'tokens' OR NOT plan.overage OR plan.allowance IS NULL OR COALESCE(plan.price, 0) = 0 THEN RETURN 0; END IF;
  -- The user's lock, as svc_start_run takes it (NO KEY UPDATE: key checks of rows naming the user do not wait for it).
  PERFORM 1 FROM end_users WHERE id = p_user FOR NO KEY UPDATE;
  -- The tokens the plan's window (svc_plan_window) already counts (svc_usage_window).
  SELECT w.used INTO used FROM svc_usage_window(p_app, p_env, p_user, svc_plan_window(plan.period, p_period), 'tokens') w;
  RETURN GREATEST(0, LEAST(p_tokens, used + p_tokens - plan.allowance)) * plan.price / 1000;
END;
$$;
