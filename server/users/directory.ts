import type { z } from "zod";
import type { OwnerUserDetail, OwnerUserPage, OwnerUserQuery } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { MachineService } from "../machines/machines.js";
import type { UserLedger } from "./ledger.js";
import { environmentCurrency } from "../ledger/usage-summary.js";
import { keysetPage } from "../db/keyset-cursor.js";

interface UserRow {
  id: string;
  external_id: string;
  created_at: Date | string;
  last_run_at: Date | string | null;
}

/**
 * The app owner's view of an environment's end users: a searchable list, newest
 * first, and one user in full. Each user's plan, allowance and spend are the
 * ledger's own view of them (`UserLedger.view`, the rules the run start applies),
 * so the dashboard never disagrees with `GET /v1/users/:id`.
 */
export class UserDirectory {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly users: UserLedger,
    private readonly machines: MachineService,
  ) {}

  async list(tenant: Tenant, q: z.infer<typeof OwnerUserQuery>): Promise<z.infer<typeof OwnerUserPage>> {
    // `q` matches a part of the id or the email, literally: LIKE's wildcards in it are escaped.
    const pattern = q.q ? `%${q.q.replace(/[\\%_]/g, (c) => `\\${c}`)}%` : null;
    const { rows: page, hasMore, nextCursor } = await keysetPage(q, (after, take) =>
      this.db.query<UserRow>(
        `SELECT u.id, u.external_id, u.created_at,
                (SELECT max(r.created_at) FROM runs r WHERE r.end_user_id = u.id) AS last_run_at
           FROM end_users u
          WHERE u.app_id = $1 AND u.environment = $2::"Environment"
            AND ($3::text IS NULL OR u.external_id ILIKE $3 OR u.email ILIKE $3)
            AND ($4::timestamptz IS NULL OR (u.created_at, u.id) < ($4::timestamptz, $5::text))
          ORDER BY u.created_at DESC, u.id DESC LIMIT $6`,
        [tenant.appId, tenant.environment, pattern, after?.createdAt ?? null, after?.id ?? null, take],
      ),
      (r) => r.created_at,
    );
    const currency = await environmentCurrency(this.db, tenant);
    // One ledger view per user of the page (a page is at most 200).
    const data = [];
    for (const r of page) {
      const v = await this.users.view(tenant, r.external_id);
      data.push({
        id: v.id,
        email: v.email,
        plan: v.plan ? { slug: v.plan.slug, name: v.plan.name } : null,
        subscriptionStatus: v.subscription?.status ?? null,
        allowance: v.allowance,
        runs: v.usage.runs,
        amountMicros: v.usage.amountMicros,
        currency: v.plan?.currency ?? currency,
        machines: v.connected.machines,
        online: v.connected.online,
        lastRunAt: r.last_run_at === null ? null : new Date(r.last_run_at).toISOString(),
        createdAt: v.createdAt,
      });
    }
    return { data, hasMore, nextCursor };
  }

  /** One user: the ledger's view, the currency of their amounts, their machines (live state, runtime versions) and their browser sessions. */
  async get(tenant: Tenant, externalId: string): Promise<z.infer<typeof OwnerUserDetail>> {
    const user = await this.users.view(tenant, externalId);
    const [machines, sessions, currency] = await Promise.all([
      this.machines.listForExternalUser(tenant, externalId),
      this.db.query<{ id: string; created_at: Date | string; expires_at: Date | string; ended_at: Date | string | null }>(
        `SELECT s.id, s.created_at, s.expires_at, s.ended_at FROM end_user_sessions s JOIN end_users u ON u.id = s.end_user_id
          WHERE u.app_id = $1 AND u.environment = $2::"Environment" AND u.external_id = $3
          ORDER BY s.created_at DESC, s.id DESC LIMIT 50`,
        [tenant.appId, tenant.environment, externalId],
      ),
      environmentCurrency(this.db, tenant),
    ]);
    const now = this.clock.now().getTime();
    return {
      user,
      currency: user.plan?.currency ?? currency,
      machines,
      sessions: sessions.map((s) => ({
        id: s.id,
        createdAt: new Date(s.created_at).toISOString(),
        expiresAt: new Date(s.expires_at).toISOString(),
        endedAt: s.ended_at === null ? null : new Date(s.ended_at).toISOString(),
        live: s.ended_at === null && new Date(s.expires_at).getTime() > now,
      })),
    };
  }
}
