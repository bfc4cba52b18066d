-- PL/pgSQL, not SQL: a session keeps its plan (a SQL function's query is planned again at every call, ≈ 0.2 ms).
CREATE OR REPLACE FUNCTION "svc_user_subscription"(p_app TEXT, p_env "Environment", p_user TEXT)
RETURNS TEXT LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT s.id FROM subscriptions s
   WHERE s.app_id = p_app AND s.environment = p_env AND s.end_user_id = p_user AND svc_subscription_live(s.status)
   ORDER BY (s.source = 'stripe') DESC, s.created_at DESC LIMIT 1);
END;
$$;
