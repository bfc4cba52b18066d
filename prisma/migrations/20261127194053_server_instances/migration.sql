-- CreateTable
CREATE TABLE "server_instances" (
    "id" TEXT NOT NULL,
    "started_at" TIMESTAMPTZ(3) NOT NULL,
    "alive_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "server_instances_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "machines_connected_instance_idx" ON "machines"("connected_instance");

