-- CreateIndex
CREATE UNIQUE INDEX "billing_accounts_stripe_account_id_environment_key" ON "billing_accounts"("stripe_account_id", "environment");

