-- AlterTable
ALTER TABLE "runs" ADD COLUMN     "agent_state" JSONB;
