import os from "node:os";
import path from "node:path";
import pg from "pg";
import type { TestProject } from "vitest/node";
import { buildServer, isFresh } from "../../scripts/build-server.mjs";
import { ensureTestTools } from "../../scripts/test-tools.mjs";
import { pgliteTemplate, postgresTemplate, templateHash } from "./templates.js";

/**
 * Decides once whether the Postgres suites run. With a reachable Postgres they
 * do; without one they are skipped and the run says so plainly, unless
 * SVC_TEST_POSTGRES=1 (CI) demands them, in which case the run fails.
 */
export default async function setup(project: TestProject) {
  ensureTestTools();
  // Where each test file adds up the answers it checked against openapi.json (the totals reporter prints the sum).
  process.env.SVC_OPENAPI_CHECK_LOG = path.join(os.tmpdir(), `svc-openapi-check-${process.pid}-${Date.now()}.jsonl`);
  // The process tests run the server as `npm start` does: the production build, current with the sources.
  if (!isFresh()) await buildServer();
  const url = process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  const required = process.env.SVC_TEST_POSTGRES === "1";
  let reason: string | null = null;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("select 1");
  } catch (err) {
    reason = (err as Error).message || String(err);
  } finally {
    await client.end().catch(() => {});
  }
  if (reason && required) throw new Error(`SVC_TEST_POSTGRES=1 but Postgres at ${url} is not reachable: ${reason}`);
  if (reason) {
    // Read again by the totals reporter, so the notice is also at the end of the run.
    process.env.SVC_TEST_POSTGRES_SKIPPED = `Postgres suites SKIPPED: no Postgres reachable at ${url}.`;
    process.stdout.write(`\n  Postgres suites SKIPPED: no Postgres reachable at ${url} (${reason}). Only the PGlite suites run.\n  Start Postgres or set SVC_TEST_POSTGRES_URL to run them.\n\n`);
  }
  project.provide("postgresUrl", reason ? null : url);
  // Each suite's database is a copy of one migrated per set of migrations (see templates.ts).
  const hash = templateHash();
  project.provide("pgliteTemplate", await pgliteTemplate(hash));
  project.provide("postgresTemplate", reason ? null : await postgresTemplate(url, hash));
}

declare module "vitest" {
  export interface ProvidedContext {
    postgresUrl: string | null;
    /** The migrated PGlite data folder each in-process server starts on a copy of. */
    pgliteTemplate: string;
    /** The migrated Postgres database `create({ migrated: true })` copies. */
    postgresTemplate: string | null;
  }
}
