-- AlterTable
ALTER TABLE "billing_accounts" ADD COLUMN     "charges_enabled" BOOLEAN,
ADD COLUMN     "checked_at" TIMESTAMPTZ(3),
ADD COLUMN     "connected_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
ADD COLUMN     "connected_via" TEXT NOT NULL DEFAULT 'legacy',
ADD COLUMN     "details_submitted" BOOLEAN,
ADD COLUMN     "payouts_enabled" BOOLEAN,
ADD COLUMN     "requirements" JSONB;

-- Accounts attached before Connect was required were never verified: they stay `legacy` (hand-edited), and a
-- verified connection of the same account by another app displaces them. New rows always say how they were attached.
ALTER TABLE "billing_accounts" ALTER COLUMN "connected_via" DROP DEFAULT;

-- CreateTable
CREATE TABLE "billing_connect_states" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "mode" TEXT NOT NULL,
    "stripe_account_id" TEXT,
    "return_url" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "used_at" TIMESTAMPTZ(3),

    CONSTRAINT "billing_connect_states_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "billing_connect_states_app_id_environment_expires_at_idx" ON "billing_connect_states"("app_id", "environment", "expires_at");

-- CreateIndex
CREATE INDEX "billing_connect_states_expires_at_idx" ON "billing_connect_states"("expires_at");

