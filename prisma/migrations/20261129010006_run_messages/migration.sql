-- Each instance says it stores runs' conversations in run_messages (see run-writer.ts: while one that does not is alive, a run's whole conversation stays on its row too).
-- AlterTable
ALTER TABLE "server_instances" ADD COLUMN     "stores_run_messages" BOOLEAN NOT NULL DEFAULT false;

-- CreateTable
CREATE TABLE "run_messages" (
    "run_id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "n" INTEGER NOT NULL,
    "message" JSONB NOT NULL,

    CONSTRAINT "run_messages_pkey" PRIMARY KEY ("run_id","n")
);

-- AddForeignKey
ALTER TABLE "run_messages" ADD CONSTRAINT "run_messages_run_id_app_id_environment_fkey" FOREIGN KEY ("run_id", "app_id", "environment") REFERENCES "runs"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

