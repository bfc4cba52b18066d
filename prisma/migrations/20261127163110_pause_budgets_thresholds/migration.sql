-- AlterEnum
ALTER TYPE "RunStatus" ADD VALUE 'paused';

-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "budget" JSONB,
ADD COLUMN     "paused_at" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "plans" ADD COLUMN     "alert_thresholds" INTEGER[] DEFAULT ARRAY[80, 100]::INTEGER[];

