-- AlterTable
ALTER TABLE "runtimes" ADD COLUMN     "max_concurrent_jobs" INTEGER;

-- CreateIndex
CREATE INDEX "runs_machine_id_runtime_name_status_idx" ON "runs"("machine_id", "runtime_name", "status");

