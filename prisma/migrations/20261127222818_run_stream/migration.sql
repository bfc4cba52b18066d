-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "events_in_stream" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "outbox" JSONB,
ADD COLUMN     "pause" JSONB;

-- CreateIndex
CREATE INDEX "runs_events_in_stream_finished_at_idx" ON "runs"("events_in_stream", "finished_at");
