-- Three indexes of `runs` hold only the runs they are read for (partial indexes), not every run ever made.
-- A run's row is updated about five times in its life; an update that changes an indexed column (its status
-- at the first tool call and at its end, its lease) writes a new entry into every index of the table, and
-- these three took one for every run and every such update, to be read for almost none of them
-- (`bench/trace.ts postgres`, `pg_waldump`: 32 index entries a run on `runs`, 4 in each of its 8 indexes).
--
-- The lease sweeps (claim, orphans, renewal) read active runs only (`status IN (…active…)`, ACTIVE_STATUSES):
-- a finished run leaves the index, which no longer grows with the runs' history.
DROP INDEX "runs_status_lease_expires_at_idx";
CREATE INDEX "runs_status_lease_expires_at_idx" ON "runs"("status", "lease_expires_at") WHERE "status" IN ('queued', 'running', 'waiting', 'paused');
-- A retried identical chat completion is found by its request's hash (`svc_start_run`, `request_hash = …`):
-- runs started with POST /v1/runs have none.
DROP INDEX "runs_app_id_environment_request_hash_created_at_idx";
CREATE INDEX "runs_app_id_environment_request_hash_created_at_idx" ON "runs"("app_id", "environment", "request_hash", "created_at") WHERE "request_hash" IS NOT NULL;
-- The run bus's compaction sweep (`events_in_stream AND finished_at < …`): runs whose events are on NATS
-- JetStream; without the bus (PGlite, Postgres alone), none.
DROP INDEX "runs_events_in_stream_finished_at_idx";
CREATE INDEX "runs_events_in_stream_finished_at_idx" ON "runs"("events_in_stream", "finished_at") WHERE "events_in_stream";
