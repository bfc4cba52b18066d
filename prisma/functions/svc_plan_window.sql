-- The ledger periods a plan's window spans, as a LIKE pattern over usage_rows.period: ledger rows keep
-- their calendar month (`2026-11`); a yearly plan's window is every month of the year (`2026-%`).
-- No plan (NULL): the month. The one place the window is decided: the run start, the token overage
-- and the user's view (svc_user_usage) all take it from here.
CREATE OR REPLACE FUNCTION "svc_plan_window"(p_plan_period TEXT, p_period TEXT)
RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_plan_period = 'year' THEN left(p_period, 4) || '-%' ELSE p_period END;
$$;
