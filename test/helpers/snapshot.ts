import type { Database } from "../../server/db/open.js";

/** Row counts of every table: "nothing changed" for requests that must change nothing. */
export async function tableCounts(db: Database): Promise<Record<string, number>> {
  const tables = await db.query<{ tablename: string }>(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`);
  const counts: Record<string, number> = {};
  for (const { tablename } of tables) {
    const [row] = await db.query<{ n: string | number }>(`SELECT count(*) AS n FROM "${tablename}"`);
    counts[tablename] = Number(row.n);
  }
  return counts;
}
