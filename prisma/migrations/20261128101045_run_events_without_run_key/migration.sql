-- DropForeignKey
ALTER TABLE "run_events" DROP CONSTRAINT "run_events_run_id_app_id_environment_fkey";

