-- AlterTable
ALTER TABLE "subscriptions" ADD COLUMN     "canceled_at" TIMESTAMPTZ(3),
ADD COLUMN     "last_event_at" TIMESTAMPTZ(3),
ADD COLUMN     "source" TEXT NOT NULL DEFAULT 'stripe',
ADD COLUMN     "stripe_checkout_session_id" TEXT;

-- AlterTable
ALTER TABLE "webhook_deliveries" ADD COLUMN     "delivered_at" TIMESTAMPTZ(3),
ADD COLUMN     "event_key" TEXT NOT NULL;

-- CreateTable
CREATE TABLE "webhook_attempts" (
    "delivery_id" TEXT NOT NULL,
    "attempt" INTEGER NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "status_code" INTEGER,
    "error" TEXT,
    "duration_ms" INTEGER NOT NULL,

    CONSTRAINT "webhook_attempts_pkey" PRIMARY KEY ("delivery_id","attempt")
);

-- CreateIndex
CREATE UNIQUE INDEX "subscriptions_stripe_checkout_session_id_key" ON "subscriptions"("stripe_checkout_session_id");

-- CreateIndex
CREATE UNIQUE INDEX "webhook_deliveries_endpoint_id_event_key_key" ON "webhook_deliveries"("endpoint_id", "event_key");

-- AddForeignKey
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_delivery_id_fkey" FOREIGN KEY ("delivery_id") REFERENCES "webhook_deliveries"("id") ON DELETE CASCADE ON UPDATE CASCADE;

