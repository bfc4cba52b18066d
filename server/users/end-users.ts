import type { Prisma } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { Tx } from "../ledger/metering.js";
import { randomId } from "../crypto.js";

/**
 * Our id for the app's user `externalId`, creating the user the first time the
 * app names them. One statement (insert or keep), so concurrent first requests
 * for a new user all get the same row instead of racing to create it.
 */
export async function ensureEndUser(db: Prisma | Tx, tenant: Tenant, externalId: string, email?: string): Promise<string> {
  const rows = await db.$queryRaw<{ id: string }[]>`
    INSERT INTO end_users (id, app_id, environment, external_id, email)
    VALUES (${randomId("eu_", 20)}, ${tenant.appId}, ${tenant.environment}::"Environment", ${externalId}, ${email ?? null})
    ON CONFLICT (app_id, environment, external_id)
    DO UPDATE SET email = COALESCE(EXCLUDED.email, end_users.email)
    RETURNING id`;
  return rows[0].id;
}
