CREATE OR REPLACE FUNCTION "svc_user_subscription"(p_app TEXT, p_env "Environment", p_user TEXT)
RETURNS TEXT LANGUAGE sql STABLE AS $$
  SELECT s.id FROM subscriptions s
   WHERE s.app_id = p_app AND s.environment = p_env AND s.end_user_id = p_user AND svc_subscription_live(s.status)
   ORDER BY (s.source = 'stripe') DESC, s.created_at DESC LIMIT 1;
$$;
