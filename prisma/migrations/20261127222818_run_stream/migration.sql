-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "events_in_stream" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "outbox" JSONB,
ADD COLUMN     "pause" JSONB;


-- Written by hand (Prisma's schema cannot say a partial index): the finished runs whose
-- events are still on the run bus, found by the engine's compaction sweep. Small: a run
-- leaves it once compacted, moments after it ends.
CREATE INDEX "runs_in_stream_finished_idx" ON "runs" ("finished_at") WHERE "events_in_stream";
