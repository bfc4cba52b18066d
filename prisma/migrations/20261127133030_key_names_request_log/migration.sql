-- AlterTable
ALTER TABLE "app_keys" ADD COLUMN     "created_by" TEXT,
ADD COLUMN     "name" TEXT;

-- AlterTable
ALTER TABLE "connect_keys" ADD COLUMN     "created_by" TEXT,
ADD COLUMN     "name" TEXT;

-- CreateTable
CREATE TABLE "api_requests" (
    "id" BIGSERIAL NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "key_id" TEXT NOT NULL,
    "request_id" TEXT NOT NULL,
    "method" TEXT NOT NULL,
    "path" TEXT NOT NULL,
    "route" TEXT NOT NULL,
    "status" INTEGER NOT NULL,
    "error_code" TEXT,
    "duration_ms" INTEGER NOT NULL,
    "run_id" TEXT,
    "user" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "api_requests_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "api_requests_app_id_environment_created_at_id_idx" ON "api_requests"("app_id", "environment", "created_at" DESC, "id" DESC);

-- CreateIndex
CREATE INDEX "api_requests_created_at_idx" ON "api_requests"("created_at");

-- CreateIndex
CREATE INDEX "runs_app_id_environment_created_at_idx" ON "runs"("app_id", "environment", "created_at");

