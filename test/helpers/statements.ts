import type { Database } from "../../server/db/open.js";

/** A piece of the run writer's statement (server/runs/run-writer.ts), to pick its statements out of those watched. */
export const STEP_STATEMENT = "jsonb_to_recordset($1::jsonb) AS x(run_id";

/**
 * Runs `fn` with each statement the server sends through `db.query` shown to `see` first (its text and
 * parameters), to count or inspect what a path sends; `db` is as it was afterwards. The statements still
 * go to the real database.
 */
export async function watchingStatements<T>(db: Database, see: (text: string, params: unknown[] | undefined) => void, fn: () => Promise<T>): Promise<T> {
  const query = db.query.bind(db);
  db.query = ((text: string, params?: unknown[], options?: unknown) => {
    see(text, params);
    return query(text, params, options as never);
  }) as typeof db.query;
  try {
    return await fn();
  } finally {
    db.query = query;
  }
}
