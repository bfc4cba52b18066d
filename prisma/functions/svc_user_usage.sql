-- A user's plan window now (`p_period`: the month now) and what it holds, as the user's view shows it:
-- `period` names the window (`2026-11`, or `2026` for a yearly plan), `usage_window` is its pattern,
-- `unit` the plan's allowance unit (`runs` without a plan), `used` the usage counted against it.
-- The same rules as the run start: svc_user_plan, svc_plan_window, svc_usage_window.
CREATE OR REPLACE FUNCTION "svc_user_usage"(p_app TEXT, p_env "Environment", p_user TEXT, p_period TEXT)
RETURNS TABLE (period TEXT, usage_window TEXT, unit TEXT, runs BIGINT, input_tokens BIGINT, output_tokens BIGINT, cache_read_tokens BIGINT, cache_write_tokens BIGINT, amount_micros BIGINT, used BIGINT)
LANGUAGE sql STABLE AS $$
  SELECT split_part(w.pattern, '-%', 1), w.pattern, w.unit,
         u.runs, u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.amount_micros, u.used
    FROM (SELECT svc_plan_window(p.period, p_period) AS pattern, COALESCE(p.allowance_unit::text, 'runs') AS unit
            FROM (SELECT svc_user_plan(p_app, p_env, p_user) AS id) x LEFT JOIN plans p ON p.id = x.id) w
   CROSS JOIN LATERAL svc_usage_window(p_app, p_env, p_user, w.pattern, w.unit) u;
$$;
