-- The run start takes the route's check (hand-written: a function's new parameters make it another function,
-- so the old one goes first; the next migration, generated from prisma/functions/svc_start_run.sql, creates it).
DROP FUNCTION "svc_start_run"(TEXT, TEXT, "Environment", TEXT, TEXT, TEXT, JSONB, TEXT, TIMESTAMPTZ, "RunStatus", TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ, "CostClass", TEXT);
