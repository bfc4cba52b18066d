-- The runs that continued a run (the dashboard's chain) are found by `previous_run_id`: most runs continue none,
-- so the index holds only those that do (Prisma's schema cannot say so: see test/ops/migrations.test.ts).
DROP INDEX "runs_previous_run_id_idx";
CREATE INDEX "runs_previous_run_id_idx" ON "runs"("previous_run_id") WHERE "previous_run_id" IS NOT NULL;
