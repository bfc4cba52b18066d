-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "previous_run_id" TEXT;

-- CreateTable
CREATE TABLE "run_user_messages" (
    "run_id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "message_id" TEXT NOT NULL,
    "content" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    "delivered_at" TIMESTAMPTZ(3),
    "delivered_seq" INTEGER,

    CONSTRAINT "run_user_messages_pkey" PRIMARY KEY ("run_id","message_id")
);

-- CreateIndex
CREATE INDEX "runs_previous_run_id_idx" ON "runs"("previous_run_id");

-- AddForeignKey
ALTER TABLE "run_user_messages" ADD CONSTRAINT "run_user_messages_run_id_app_id_environment_fkey" FOREIGN KEY ("run_id", "app_id", "environment") REFERENCES "runs"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

