-- PL/pgSQL, not SQL: a session keeps its plan (a SQL function's query is planned again at every call, ≈ 0.2 ms).
CREATE OR REPLACE FUNCTION "svc_user_plan"(p_app TEXT, p_env "Environment", p_user TEXT)
RETURNS TEXT LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT COALESCE(
    (SELECT s.plan_id FROM subscriptions s WHERE s.id = svc_user_subscription(p_app, p_env, p_user)),
    (SELECT d.id FROM plans d WHERE d.app_id = p_app AND d.environment = p_env AND d.is_default AND d.archived_at IS NULL ORDER BY d.created_at LIMIT 1)));
END;
$$;
