-- AlterTable
ALTER TABLE "runtimes" ADD COLUMN     "billing" TEXT,
ADD COLUMN     "note" TEXT,
ADD COLUMN     "supported" BOOLEAN NOT NULL DEFAULT true,
ADD COLUMN     "version" TEXT;

