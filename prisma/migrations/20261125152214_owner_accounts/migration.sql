-- CreateEnum
CREATE TYPE "MemberRole" AS ENUM ('owner', 'member');

-- CreateTable
CREATE TABLE "owners" (
    "id" TEXT NOT NULL,
    "email" TEXT NOT NULL,
    "name" TEXT,
    "password_hash" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "owners_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "owner_sessions" (
    "id" TEXT NOT NULL,
    "owner_id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "csrf_token" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    "last_seen_at" TIMESTAMPTZ(3) NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "ended_at" TIMESTAMPTZ(3),

    CONSTRAINT "owner_sessions_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "app_members" (
    "app_id" TEXT NOT NULL,
    "owner_id" TEXT NOT NULL,
    "role" "MemberRole" NOT NULL,
    "joined_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "app_members_pkey" PRIMARY KEY ("app_id","owner_id")
);

-- CreateTable
CREATE TABLE "owner_invites" (
    "id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "app_id" TEXT NOT NULL,
    "email" TEXT,
    "role" "MemberRole" NOT NULL,
    "created_by" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "used_at" TIMESTAMPTZ(3),

    CONSTRAINT "owner_invites_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "owner_sign_in_links" (
    "id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "owner_id" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "used_at" TIMESTAMPTZ(3),

    CONSTRAINT "owner_sign_in_links_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "owners_email_key" ON "owners"("email");

-- CreateIndex
CREATE UNIQUE INDEX "owner_sessions_token_hash_key" ON "owner_sessions"("token_hash");

-- CreateIndex
CREATE INDEX "owner_sessions_owner_id_idx" ON "owner_sessions"("owner_id");

-- CreateIndex
CREATE INDEX "app_members_owner_id_idx" ON "app_members"("owner_id");

-- CreateIndex
CREATE UNIQUE INDEX "owner_invites_token_hash_key" ON "owner_invites"("token_hash");

-- CreateIndex
CREATE INDEX "owner_invites_app_id_idx" ON "owner_invites"("app_id");

-- CreateIndex
CREATE UNIQUE INDEX "owner_sign_in_links_token_hash_key" ON "owner_sign_in_links"("token_hash");

-- CreateIndex
CREATE INDEX "owner_sign_in_links_owner_id_idx" ON "owner_sign_in_links"("owner_id");

-- AddForeignKey
ALTER TABLE "owner_sessions" ADD CONSTRAINT "owner_sessions_owner_id_fkey" FOREIGN KEY ("owner_id") REFERENCES "owners"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "app_members" ADD CONSTRAINT "app_members_app_id_fkey" FOREIGN KEY ("app_id") REFERENCES "apps"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "app_members" ADD CONSTRAINT "app_members_owner_id_fkey" FOREIGN KEY ("owner_id") REFERENCES "owners"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "owner_invites" ADD CONSTRAINT "owner_invites_app_id_fkey" FOREIGN KEY ("app_id") REFERENCES "apps"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "owner_invites" ADD CONSTRAINT "owner_invites_created_by_fkey" FOREIGN KEY ("created_by") REFERENCES "owners"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "owner_sign_in_links" ADD CONSTRAINT "owner_sign_in_links_owner_id_fkey" FOREIGN KEY ("owner_id") REFERENCES "owners"("id") ON DELETE CASCADE ON UPDATE CASCADE;

