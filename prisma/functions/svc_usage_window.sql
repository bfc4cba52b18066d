-- What a user's ledger rows add up to over a window (svc_plan_window's pattern), and `used`: the
-- amount counted against an allowance in `p_unit`. A `runs` plan (or no plan) counts the runs; a
-- `tokens` plan every token the model processed: input, prompt-cache reads and writes, output.
-- The one place the allowance's usage is summed: svc_start_run, svc_overage_micros and
-- svc_user_usage (the user's view) call it.
CREATE OR REPLACE FUNCTION "svc_usage_window"(p_app TEXT, p_env "Environment", p_user TEXT, p_window TEXT, p_unit TEXT)
RETURNS TABLE (runs BIGINT, input_tokens BIGINT, output_tokens BIGINT, cache_read_tokens BIGINT, cache_write_tokens BIGINT, amount_micros BIGINT, used BIGINT)
LANGUAGE sql STABLE AS $$
  SELECT s.runs, s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, s.amount_micros,
         CASE WHEN p_unit = 'tokens' THEN s.input_tokens + s.cache_read_tokens + s.cache_write_tokens + s.output_tokens ELSE s.runs END
    FROM (SELECT count(*) FILTER (WHERE u.kind = 'run') AS runs,
                 COALESCE(sum(u.input_tokens), 0)::bigint AS input_tokens,
                 COALESCE(sum(u.output_tokens), 0)::bigint AS output_tokens,
                 COALESCE(sum(u.cache_read_tokens), 0)::bigint AS cache_read_tokens,
                 COALESCE(sum(u.cache_write_tokens), 0)::bigint AS cache_write_tokens,
                 COALESCE(sum(u.amount_micros), 0)::bigint AS amount_micros
            FROM usage_rows u
           WHERE u.app_id = p_app AND u.environment = p_env AND u.end_user_id = p_user AND u.period LIKE p_window) s;
$$;
