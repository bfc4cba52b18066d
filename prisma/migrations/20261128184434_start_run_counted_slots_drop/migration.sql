-- A run's start may be given its runtime's active runs as its batch counted them (hand-written: a function's new
-- parameter makes it another function, so the old one goes first; the next migration, generated from
-- prisma/functions/svc_start_run.sql and svc_start_runs.sql, creates it).
DROP FUNCTION "svc_start_run"(TEXT, TEXT, "Environment", TEXT, TEXT, TEXT, JSONB, TEXT, TIMESTAMPTZ, "RunStatus", TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ, "CostClass", TEXT, TEXT, INT, BOOLEAN, INT);
