-- CreateTable
CREATE TABLE "plan_signals" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "period" TEXT NOT NULL,
    "threshold" INTEGER,
    "measure" TEXT NOT NULL,
    "run_id" TEXT,
    "unique_key" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "plan_signals_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "plan_signals_app_id_environment_at_idx" ON "plan_signals"("app_id", "environment", "at");

-- CreateIndex
CREATE UNIQUE INDEX "plan_signals_app_id_environment_unique_key_key" ON "plan_signals"("app_id", "environment", "unique_key");

