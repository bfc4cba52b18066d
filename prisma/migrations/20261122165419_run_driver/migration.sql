-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "cancel_reason" TEXT,
ADD COLUMN     "cancel_requested_at" TIMESTAMPTZ(3),
ADD COLUMN     "input_tokens" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "last_seq" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "output" TEXT,
ADD COLUMN     "output_tokens" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "transcript" JSONB,
ADD COLUMN     "usage_reported_at" TIMESTAMPTZ(3);

