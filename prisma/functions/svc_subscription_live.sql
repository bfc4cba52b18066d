-- The subscription statuses that entitle a user to their plan. The one list of them in SQL; the
-- server's TypeScript has the same list once (LIVE_SUBSCRIPTION_STATUSES, server/ledger/functions.ts),
-- which test/sql-functions.test.ts checks equal to this one.
CREATE OR REPLACE FUNCTION "svc_subscription_live"(p_status TEXT)
RETURNS BOOLEAN LANGUAGE sql IMMUTABLE AS $$
  SELECT p_status IN ('active', 'trialing');
$$;
