-- A run's row is rewritten at every step of the run (its last event, transcript, state): room left on each page
-- lets Postgres write the new version beside the old one without touching the table's seven indexes (a HOT update).
ALTER TABLE "runs" SET (fillfactor = 70);
