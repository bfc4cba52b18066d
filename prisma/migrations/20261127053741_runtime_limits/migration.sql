-- AlterTable
ALTER TABLE "runtimes" ADD COLUMN     "limits" JSONB;

