-- AlterTable
ALTER TABLE "server_instances" ADD COLUMN     "marks_watched_runs" BOOLEAN NOT NULL DEFAULT false;

-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "watched_elsewhere" BOOLEAN NOT NULL DEFAULT false;

