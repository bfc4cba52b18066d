-- CreateSchema
CREATE SCHEMA IF NOT EXISTS "public";

-- CreateEnum
CREATE TYPE "Environment" AS ENUM ('test', 'live');

-- CreateEnum
CREATE TYPE "RuntimeKind" AS ENUM ('model', 'agent');

-- CreateEnum
CREATE TYPE "CostClass" AS ENUM ('user_hardware', 'user_subscription', 'app_served', 'free');

-- CreateEnum
CREATE TYPE "RunStatus" AS ENUM ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled', 'handed_back');

-- CreateEnum
CREATE TYPE "DeviceAuthStatus" AS ENUM ('pending', 'approved', 'denied', 'consumed');

-- CreateEnum
CREATE TYPE "AllowanceUnit" AS ENUM ('runs', 'tokens');

-- CreateEnum
CREATE TYPE "WebhookDeliveryStatus" AS ENUM ('pending', 'delivered', 'failed');

-- CreateTable
CREATE TABLE "apps" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "apps_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "app_keys" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "secret_hash" TEXT NOT NULL,
    "hint" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3),
    "revoked_at" TIMESTAMPTZ(3),
    "last_used_at" TIMESTAMPTZ(3),
    "replaced_by" TEXT,

    CONSTRAINT "app_keys_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "connect_keys" (
    "key" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3),
    "revoked_at" TIMESTAMPTZ(3),

    CONSTRAINT "connect_keys_pkey" PRIMARY KEY ("key")
);

-- CreateTable
CREATE TABLE "end_users" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "external_id" TEXT NOT NULL,
    "email" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "end_users_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "end_user_sessions" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "ended_at" TIMESTAMPTZ(3),

    CONSTRAINT "end_user_sessions_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "device_authorizations" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "connect_key" TEXT NOT NULL,
    "device_code_hash" TEXT NOT NULL,
    "user_code_hash" TEXT NOT NULL,
    "status" "DeviceAuthStatus" NOT NULL DEFAULT 'pending',
    "hostname" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "arch" TEXT NOT NULL,
    "client" TEXT NOT NULL,
    "client_version" TEXT,
    "interval_seconds" INTEGER NOT NULL,
    "last_polled_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "end_user_id" TEXT,
    "answered_at" TIMESTAMPTZ(3),
    "machine_id" TEXT,

    CONSTRAINT "device_authorizations_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "machines" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "hostname" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "arch" TEXT NOT NULL,
    "client" TEXT NOT NULL,
    "client_version" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "revoked_at" TIMESTAMPTZ(3),
    "connected_instance" TEXT,
    "connected_at" TIMESTAMPTZ(3),
    "last_heartbeat_at" TIMESTAMPTZ(3),

    CONSTRAINT "machines_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "runtimes" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "machine_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "kind" "RuntimeKind" NOT NULL,
    "cost_class" "CostClass" NOT NULL,
    "models" JSONB NOT NULL DEFAULT '[]',
    "busy" BOOLEAN NOT NULL DEFAULT false,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "runtimes_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "runs" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "model" TEXT NOT NULL,
    "request" JSONB NOT NULL,
    "request_hash" TEXT,
    "status" "RunStatus" NOT NULL DEFAULT 'queued',
    "route_kind" TEXT,
    "machine_id" TEXT,
    "runtime_name" TEXT,
    "stop_reason" TEXT,
    "error" JSONB,
    "turns" INTEGER NOT NULL DEFAULT 0,
    "lease_owner" TEXT,
    "lease_expires_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finished_at" TIMESTAMPTZ(3),

    CONSTRAINT "runs_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "run_events" (
    "run_id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "seq" INTEGER NOT NULL,
    "kind" TEXT NOT NULL,
    "data" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "run_events_pkey" PRIMARY KEY ("run_id","seq")
);

-- CreateTable
CREATE TABLE "tool_calls" (
    "run_id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "call_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "arguments" JSONB NOT NULL,
    "result" JSONB,
    "is_error" BOOLEAN,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deadline_at" TIMESTAMPTZ(3) NOT NULL,
    "answered_at" TIMESTAMPTZ(3),

    CONSTRAINT "tool_calls_pkey" PRIMARY KEY ("run_id","call_id")
);

-- CreateTable
CREATE TABLE "approvals" (
    "run_id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "approval_id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "request" JSONB NOT NULL,
    "decision" TEXT,
    "reason" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deadline_at" TIMESTAMPTZ(3) NOT NULL,
    "answered_at" TIMESTAMPTZ(3),

    CONSTRAINT "approvals_pkey" PRIMARY KEY ("run_id","approval_id")
);

-- CreateTable
CREATE TABLE "usage_rows" (
    "id" BIGSERIAL NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "run_id" TEXT,
    "cost_class" "CostClass" NOT NULL,
    "kind" TEXT NOT NULL,
    "input_tokens" BIGINT NOT NULL DEFAULT 0,
    "output_tokens" BIGINT NOT NULL DEFAULT 0,
    "amount_micros" BIGINT NOT NULL DEFAULT 0,
    "period" TEXT NOT NULL,
    "unique_key" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "usage_rows_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "plans" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "slug" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "description" TEXT,
    "price_micros" BIGINT NOT NULL DEFAULT 0,
    "currency" TEXT NOT NULL DEFAULT 'usd',
    "period" TEXT NOT NULL DEFAULT 'month',
    "allowance_unit" "AllowanceUnit" NOT NULL DEFAULT 'runs',
    "allowance" BIGINT,
    "overage" BOOLEAN NOT NULL DEFAULT false,
    "overage_price_micros" BIGINT,
    "spend_ceiling_micros" BIGINT,
    "trial_days" INTEGER NOT NULL DEFAULT 0,
    "stripe_price_id" TEXT,
    "is_default" BOOLEAN NOT NULL DEFAULT false,
    "archived_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "plans_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "subscriptions" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "end_user_id" TEXT NOT NULL,
    "plan_id" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "stripe_customer_id" TEXT,
    "stripe_subscription_id" TEXT,
    "trial_ends_at" TIMESTAMPTZ(3),
    "current_period_start" TIMESTAMPTZ(3) NOT NULL,
    "current_period_end" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "subscriptions_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "billing_accounts" (
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "stripe_account_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "billing_accounts_pkey" PRIMARY KEY ("app_id","environment")
);

-- CreateTable
CREATE TABLE "stripe_events" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "type" TEXT NOT NULL,
    "received_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "stripe_events_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "webhook_endpoints" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "url" TEXT NOT NULL,
    "secret" TEXT NOT NULL,
    "event_types" TEXT[],
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "disabled_at" TIMESTAMPTZ(3),

    CONSTRAINT "webhook_endpoints_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "webhook_deliveries" (
    "id" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "environment" "Environment" NOT NULL,
    "endpoint_id" TEXT NOT NULL,
    "event_type" TEXT NOT NULL,
    "payload" JSONB NOT NULL,
    "status" "WebhookDeliveryStatus" NOT NULL DEFAULT 'pending',
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "next_attempt_at" TIMESTAMPTZ(3),
    "last_status_code" INTEGER,
    "last_error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "webhook_deliveries_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "rate_limit_buckets" (
    "key" TEXT NOT NULL,
    "count" INTEGER NOT NULL,
    "window_start" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "rate_limit_buckets_pkey" PRIMARY KEY ("key")
);

-- CreateIndex
CREATE INDEX "app_keys_app_id_environment_idx" ON "app_keys"("app_id", "environment");

-- CreateIndex
CREATE INDEX "connect_keys_app_id_environment_idx" ON "connect_keys"("app_id", "environment");

-- CreateIndex
CREATE UNIQUE INDEX "end_users_app_id_environment_external_id_key" ON "end_users"("app_id", "environment", "external_id");

-- CreateIndex
CREATE UNIQUE INDEX "end_users_id_app_id_environment_key" ON "end_users"("id", "app_id", "environment");

-- CreateIndex
CREATE UNIQUE INDEX "end_user_sessions_token_hash_key" ON "end_user_sessions"("token_hash");

-- CreateIndex
CREATE INDEX "end_user_sessions_app_id_environment_end_user_id_idx" ON "end_user_sessions"("app_id", "environment", "end_user_id");

-- CreateIndex
CREATE UNIQUE INDEX "device_authorizations_device_code_hash_key" ON "device_authorizations"("device_code_hash");

-- CreateIndex
CREATE UNIQUE INDEX "device_authorizations_user_code_hash_key" ON "device_authorizations"("user_code_hash");

-- CreateIndex
CREATE UNIQUE INDEX "device_authorizations_machine_id_key" ON "device_authorizations"("machine_id");

-- CreateIndex
CREATE INDEX "device_authorizations_app_id_environment_status_idx" ON "device_authorizations"("app_id", "environment", "status");

-- CreateIndex
CREATE UNIQUE INDEX "machines_token_hash_key" ON "machines"("token_hash");

-- CreateIndex
CREATE INDEX "machines_app_id_environment_end_user_id_idx" ON "machines"("app_id", "environment", "end_user_id");

-- CreateIndex
CREATE UNIQUE INDEX "machines_id_app_id_environment_key" ON "machines"("id", "app_id", "environment");

-- CreateIndex
CREATE UNIQUE INDEX "runtimes_machine_id_name_key" ON "runtimes"("machine_id", "name");

-- CreateIndex
CREATE INDEX "runs_app_id_environment_end_user_id_created_at_idx" ON "runs"("app_id", "environment", "end_user_id", "created_at");

-- CreateIndex
CREATE INDEX "runs_app_id_environment_request_hash_created_at_idx" ON "runs"("app_id", "environment", "request_hash", "created_at");

-- CreateIndex
CREATE INDEX "runs_status_lease_expires_at_idx" ON "runs"("status", "lease_expires_at");

-- CreateIndex
CREATE UNIQUE INDEX "runs_id_app_id_environment_key" ON "runs"("id", "app_id", "environment");

-- CreateIndex
CREATE INDEX "usage_rows_app_id_environment_end_user_id_period_idx" ON "usage_rows"("app_id", "environment", "end_user_id", "period");

-- CreateIndex
CREATE UNIQUE INDEX "usage_rows_app_id_environment_unique_key_key" ON "usage_rows"("app_id", "environment", "unique_key");

-- CreateIndex
CREATE UNIQUE INDEX "plans_app_id_environment_slug_key" ON "plans"("app_id", "environment", "slug");

-- CreateIndex
CREATE UNIQUE INDEX "plans_id_app_id_environment_key" ON "plans"("id", "app_id", "environment");

-- CreateIndex
CREATE UNIQUE INDEX "subscriptions_stripe_subscription_id_key" ON "subscriptions"("stripe_subscription_id");

-- CreateIndex
CREATE INDEX "subscriptions_app_id_environment_end_user_id_idx" ON "subscriptions"("app_id", "environment", "end_user_id");

-- CreateIndex
CREATE INDEX "webhook_endpoints_app_id_environment_idx" ON "webhook_endpoints"("app_id", "environment");

-- CreateIndex
CREATE UNIQUE INDEX "webhook_endpoints_id_app_id_environment_key" ON "webhook_endpoints"("id", "app_id", "environment");

-- CreateIndex
CREATE INDEX "webhook_deliveries_status_next_attempt_at_idx" ON "webhook_deliveries"("status", "next_attempt_at");

-- CreateIndex
CREATE INDEX "webhook_deliveries_app_id_environment_created_at_idx" ON "webhook_deliveries"("app_id", "environment", "created_at");

-- AddForeignKey
ALTER TABLE "app_keys" ADD CONSTRAINT "app_keys_app_id_fkey" FOREIGN KEY ("app_id") REFERENCES "apps"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "connect_keys" ADD CONSTRAINT "connect_keys_app_id_fkey" FOREIGN KEY ("app_id") REFERENCES "apps"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "end_users" ADD CONSTRAINT "end_users_app_id_fkey" FOREIGN KEY ("app_id") REFERENCES "apps"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "end_user_sessions" ADD CONSTRAINT "end_user_sessions_end_user_id_app_id_environment_fkey" FOREIGN KEY ("end_user_id", "app_id", "environment") REFERENCES "end_users"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "device_authorizations" ADD CONSTRAINT "device_authorizations_end_user_id_app_id_environment_fkey" FOREIGN KEY ("end_user_id", "app_id", "environment") REFERENCES "end_users"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "machines" ADD CONSTRAINT "machines_end_user_id_app_id_environment_fkey" FOREIGN KEY ("end_user_id", "app_id", "environment") REFERENCES "end_users"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "runtimes" ADD CONSTRAINT "runtimes_machine_id_app_id_environment_fkey" FOREIGN KEY ("machine_id", "app_id", "environment") REFERENCES "machines"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "runs" ADD CONSTRAINT "runs_end_user_id_app_id_environment_fkey" FOREIGN KEY ("end_user_id", "app_id", "environment") REFERENCES "end_users"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "runs" ADD CONSTRAINT "runs_machine_id_app_id_environment_fkey" FOREIGN KEY ("machine_id", "app_id", "environment") REFERENCES "machines"("id", "app_id", "environment") ON DELETE NO ACTION ON UPDATE NO ACTION;

-- AddForeignKey
ALTER TABLE "run_events" ADD CONSTRAINT "run_events_run_id_app_id_environment_fkey" FOREIGN KEY ("run_id", "app_id", "environment") REFERENCES "runs"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "tool_calls" ADD CONSTRAINT "tool_calls_run_id_app_id_environment_fkey" FOREIGN KEY ("run_id", "app_id", "environment") REFERENCES "runs"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_run_id_app_id_environment_fkey" FOREIGN KEY ("run_id", "app_id", "environment") REFERENCES "runs"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_rows" ADD CONSTRAINT "usage_rows_end_user_id_app_id_environment_fkey" FOREIGN KEY ("end_user_id", "app_id", "environment") REFERENCES "end_users"("id", "app_id", "environment") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_rows" ADD CONSTRAINT "usage_rows_run_id_app_id_environment_fkey" FOREIGN KEY ("run_id", "app_id", "environment") REFERENCES "runs"("id", "app_id", "environment") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "subscriptions" ADD CONSTRAINT "subscriptions_end_user_id_app_id_environment_fkey" FOREIGN KEY ("end_user_id", "app_id", "environment") REFERENCES "end_users"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "subscriptions" ADD CONSTRAINT "subscriptions_plan_id_app_id_environment_fkey" FOREIGN KEY ("plan_id", "app_id", "environment") REFERENCES "plans"("id", "app_id", "environment") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_endpoint_id_app_id_environment_fkey" FOREIGN KEY ("endpoint_id", "app_id", "environment") REFERENCES "webhook_endpoints"("id", "app_id", "environment") ON DELETE CASCADE ON UPDATE CASCADE;

