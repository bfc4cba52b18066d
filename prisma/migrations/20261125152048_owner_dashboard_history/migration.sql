-- AlterTable
ALTER TABLE "approvals" ADD COLUMN     "decided_by" TEXT;

-- CreateTable
CREATE TABLE "subscription_changes" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "subscription_id" TEXT NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "plan_id" TEXT NOT NULL,
    "from_status" TEXT,
    "to_status" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "subscription_changes_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "payments" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "subscription_id" TEXT,
    "plan_id" TEXT,
    "stripe_invoice_id" TEXT NOT NULL,
    "amount_micros" BIGINT NOT NULL,
    "currency" TEXT NOT NULL,
    "paid_at" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "payments_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "subscription_changes_app_id_environment_at_idx" ON "subscription_changes"("app_id", "environment", "at");

-- CreateIndex
CREATE INDEX "subscription_changes_subscription_id_at_idx" ON "subscription_changes"("subscription_id", "at");

-- CreateIndex
CREATE INDEX "payments_app_id_environment_paid_at_idx" ON "payments"("app_id", "environment", "paid_at");

-- CreateIndex
CREATE UNIQUE INDEX "payments_app_id_environment_stripe_invoice_id_key" ON "payments"("app_id", "environment", "stripe_invoice_id");

-- AddForeignKey
ALTER TABLE "subscription_changes" ADD CONSTRAINT "subscription_changes_subscription_id_fkey" FOREIGN KEY ("subscription_id") REFERENCES "subscriptions"("id") ON DELETE CASCADE ON UPDATE CASCADE;

