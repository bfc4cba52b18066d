-- AlterTable
ALTER TABLE "runtimes" ADD COLUMN     "unavailable" TEXT;

