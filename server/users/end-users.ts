import type { Prisma, Sql } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { Tx } from "../db/open.js";
import { randomId } from "../crypto.js";

const ENSURE = `INSERT INTO end_users (id, app_id, environment, external_id, email)
  VALUES ($1, $2, $3::"Environment", $4, $5)
  ON CONFLICT (app_id, environment, external_id)
  DO UPDATE SET email = COALESCE(EXCLUDED.email, end_users.email)
  RETURNING id`;

/**
 * Our id for the app's user `externalId`, creating the user the first time the
 * app names them. One statement (insert or keep), so concurrent first requests
 * for a new user all get the same row instead of racing to create it. Runs on
 * plain SQL or inside a Prisma transaction.
 */
export async function ensureEndUser(db: Sql | Prisma | Tx, tenant: Tenant, externalId: string, email?: string): Promise<string> {
  // Users are never removed, so their ids are remembered per database: most requests name a known user (an email to record still writes).
  let known = KNOWN.get(db);
  if (!known) KNOWN.set(db, (known = new Map()));
  const key = `${tenant.appId}\n${tenant.environment}\n${externalId}`;
  const hit = known.get(key);
  if (hit && email === undefined) return hit;
  const params = [randomId("eu_", 20), tenant.appId, tenant.environment, externalId, email ?? null];
  const rows = "$queryRawUnsafe" in db ? await db.$queryRawUnsafe<{ id: string }[]>(ENSURE, ...params) : await db.query<{ id: string }>(ENSURE, params);
  if (known.size >= 100_000) known.clear();
  known.set(key, rows[0].id);
  return rows[0].id;
}

const KNOWN = new WeakMap<object, Map<string, string>>();
