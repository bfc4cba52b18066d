import type { Database } from "../../server/db/open.js";

/**
 * Tables that record requests rather than hold state: the request log (`api_requests`) writes a row for
 * every request made with an app key, refused ones included, as the access log writes a line. A request
 * that "changes nothing" still leaves its row there, written a second later by a batch.
 */
const LOG_TABLES = new Set(["api_requests"]);

/** Row counts of every table but the logs: "nothing changed" for requests that must change nothing. */
export async function tableCounts(db: Database): Promise<Record<string, number>> {
  const tables = await db.query<{ tablename: string }>(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`);
  const counts: Record<string, number> = {};
  for (const { tablename } of tables) {
    if (LOG_TABLES.has(tablename)) continue;
    const [row] = await db.query<{ n: string | number }>(`SELECT count(*) AS n FROM "${tablename}"`);
    counts[tablename] = Number(row.n);
  }
  return counts;
}

/** Columns a live system rewrites on its own (leases renewed, heartbeats, a run marked as read on another instance than its driver's): not a change anyone made. */
const VOLATILE_COLUMNS = ["lease_owner", "lease_expires_at", "last_heartbeat_at", "watched_elsewhere"];

/** Each database's tables and their columns (the schema does not change while a suite runs). */
const tableColumns = new WeakMap<Database, Promise<Map<string, Set<string>>>>();
function columnsOf(db: Database): Promise<Map<string, Set<string>>> {
  let known = tableColumns.get(db);
  if (!known) {
    known = db
      .query<{ table_name: string; column_name: string }>(`SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name`)
      .then((columns) => {
        const byTable = new Map<string, Set<string>>();
        for (const c of columns) (byTable.get(c.table_name) ?? byTable.set(c.table_name, new Set()).get(c.table_name)!).add(c.column_name);
        return byTable;
      });
    known.catch(() => tableColumns.delete(db));
    tableColumns.set(db, known);
  }
  return known;
}

/**
 * Every row one tenant owns (an app and environment; with `endUserId`, only what
 * belongs to that user of it), per table: how many and a digest of their contents.
 * Two equal fingerprints: nobody added, changed or removed anything of theirs.
 * One statement for all tables (a fingerprint is taken often).
 */
export async function tenantFingerprint(db: Database, tenant: { appId: string; environment: string }, endUserId?: string): Promise<Record<string, string>> {
  const parts: string[] = [];
  for (const [table, cols] of await columnsOf(db)) {
    if (LOG_TABLES.has(table)) continue;
    let where: string | null = null;
    if (endUserId === undefined) {
      if (cols.has("app_id") && cols.has("environment")) where = `app_id = $2 AND environment::text = $3`;
    } else if (table === "end_users") where = `id = $2`;
    else if (cols.has("end_user_id")) where = `end_user_id = $2`;
    else if (cols.has("run_id") && cols.has("app_id")) where = `run_id IN (SELECT id FROM runs WHERE end_user_id = $2)`;
    else if (cols.has("machine_id") && cols.has("app_id")) where = `machine_id IN (SELECT id FROM machines WHERE end_user_id = $2)`;
    if (!where) continue;
    parts.push(
      `SELECT '${table}' AS t, count(*)::int AS n, md5(coalesce(string_agg(x, ',' ORDER BY x), '')) AS digest
         FROM (SELECT (to_jsonb(t) - $1::text[])::text AS x FROM "${table}" t WHERE ${where}) s`,
    );
  }
  const out: Record<string, string> = {};
  if (!parts.length) return out;
  const rows = await db.query<{ t: string; n: number; digest: string }>(
    parts.join("\nUNION ALL\n"),
    endUserId === undefined ? [VOLATILE_COLUMNS, tenant.appId, tenant.environment] : [VOLATILE_COLUMNS, endUserId],
  );
  for (const row of rows) out[row.t] = `${row.n} rows, ${row.digest}`;
  return out;
}
