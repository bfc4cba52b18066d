import type { z } from "zod";
import type { Machine as MachineView } from "@svc/contract";
import type { Notifications, Prisma, Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { RuntimeAdvert, RuntimeLimits, RuntimeUnavailableReason } from "@svc/contract";
import type { WebhookFacts } from "../webhooks/facts.js";
import { WindowFacts } from "./window-facts.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId } from "../crypto.js";
import { runtimeCost, type Billing } from "../ledger/metering.js";
import { HEARTBEAT_FLUSH_MS, HeartbeatBatch } from "./heartbeats.js";
import { machineOnlineSql } from "./liveness.js";
import type { Logger } from "../logger.js";

/**
 * A machine counts as online while an instance that is alive holds its connection
 * (liveness.ts), and an instance closes a connection silent for this long: one
 * that vanished without a goodbye goes offline once this much time passes, and
 * so do the machines of an instance that died (`WORKER_HEARTBEAT_TIMEOUT_SECONDS`
 * may shorten it, never lengthen it).
 */
export const HEARTBEAT_TIMEOUT_SECONDS = 45;

type MachineRow = NonNullable<Awaited<ReturnType<Prisma["machine"]["findFirst"]>>>;
type RuntimeRow = Awaited<ReturnType<Prisma["runtime"]["findMany"]>>[number];

/** The channel on which a revocation wakes the instance holding the machine's connection. */
export const MACHINE_REVOKED_CHANNEL = "svc_machine_revoked";

/** A paired machine as its connection knows it: whose it is, in which app and environment. */
export interface MachineIdentity extends Tenant {
  machineId: string;
  endUserId: string;
  hostname: string;
  appName: string;
}

const PAIRING_TOKEN = /^pt_svc_[A-Za-z0-9_-]{43}$/;

/** Paired machines and their live state, always for one user of one app and environment. */
export class MachineService {
  /** Heartbeats gathered in memory, written for all machines in one statement per flush (heartbeats.ts). */
  private readonly beats: HeartbeatBatch;
  /** Subscription windows spent and reset, told to the app (webhooks). */
  private readonly windows: WindowFacts | null;

  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
    private readonly db: Notifications & Sql,
    private readonly facts: WebhookFacts | null = null,
    /** Heartbeats older than this: offline (the connection's holder closes it then too). */
    private readonly heartbeatTimeoutSeconds = HEARTBEAT_TIMEOUT_SECONDS,
    heartbeatFlushMs = HEARTBEAT_FLUSH_MS,
    log?: Logger,
  ) {
    this.beats = new HeartbeatBatch(db, clock, heartbeatFlushMs, undefined, (err) => log?.error({ err }, "heartbeat write failed"));
    this.windows = facts ? new WindowFacts(facts, clock) : null;
  }

  async listForUser(tenant: Tenant, endUserId: string): Promise<z.infer<typeof MachineView>[]> {
    const rows = await this.prisma.machine.findMany({
      where: { appId: tenant.appId, environment: tenant.environment, endUserId, revokedAt: null },
      include: { runtimes: { orderBy: { name: "asc" } } },
      orderBy: { createdAt: "asc" },
    });
    const holders = await this.holders(rows);
    return rows.map((m) => this.view(m, m.runtimes, holders));
  }

  /** A machine of the tenant by its id, removed ones too (a run's machine may have been removed since); null when unknown. */
  async find(tenant: Tenant, machineId: string): Promise<z.infer<typeof MachineView> | null> {
    const m = await this.prisma.machine.findFirst({
      where: { id: machineId, appId: tenant.appId, environment: tenant.environment },
      include: { runtimes: { orderBy: { name: "asc" } } },
    });
    return m ? this.view(m, m.runtimes, await this.holders([m])) : null;
  }

  /** The machines of the app's user `externalId` (none when the app has no such user yet). */
  async listForExternalUser(tenant: Tenant, externalId: string): Promise<z.infer<typeof MachineView>[]> {
    const endUserId = await this.endUserIdOf(tenant, externalId);
    return endUserId ? this.listForUser(tenant, endUserId) : [];
  }

  /** Who a pairing token speaks for; refused when unknown or revoked. */
  async verifyToken(token: string): Promise<MachineIdentity> {
    if (!PAIRING_TOKEN.test(token)) throw new ApiError("invalid_credential", "The pairing token is malformed.");
    // One plain statement (every connection, 10,000 of them after a restart, starts here).
    const [m] = await this.db.query<{ id: string; app_id: string; environment: Tenant["environment"]; end_user_id: string; hostname: string; revoked: boolean; app_name: string }>(
      `SELECT m.id, m.app_id, m.environment::text AS environment, m.end_user_id, m.hostname, m.revoked_at IS NOT NULL AS revoked, a.name AS app_name
         FROM machines m JOIN apps a ON a.id = m.app_id WHERE m.token_hash = $1`,
      [hashSecret(token)],
    );
    if (!m) throw new ApiError("invalid_credential", "The pairing token is not known.");
    if (m.revoked) throw new ApiError("revoked_credential", "This machine was removed: pair it again.");
    return { machineId: m.id, appId: m.app_id, environment: m.environment, endUserId: m.end_user_id, hostname: m.hostname, appName: m.app_name };
  }

  /**
   * The machine's connection is held by `instance` from now on; null when the
   * machine was removed meanwhile. Says what it was before (one locked read-and-write):
   * online through a live connection, or offline, and since when its last connection was held.
   */
  async markConnected(machineId: string, instance: string): Promise<{ connectedAt: Date; wasOnline: boolean; previousConnectedAt: Date | null } | null> {
    const now = this.clock.now();
    this.beats.forget(machineId, now);
    const rows = await this.db.query<{ was_online: boolean; previous_connected_at: Date | null }>(
      `WITH old AS (SELECT id, connected_instance, connected_at, ${machineOnlineSql("machines", "$3")} AS was_online FROM machines WHERE id = $1 AND revoked_at IS NULL FOR UPDATE)
       UPDATE machines m SET connected_instance = $2, connected_at = $4, last_heartbeat_at = $4 FROM old WHERE m.id = old.id
       RETURNING old.was_online, CASE WHEN old.connected_instance IS NOT NULL THEN old.connected_at END AS previous_connected_at`,
      [machineId, instance, this.onlineCutoff(), now],
    );
    const r = rows[0];
    return r ? { connectedAt: now, wasOnline: r.was_online, previousConnectedAt: r.previous_connected_at ? new Date(r.previous_connected_at) : null } : null;
  }

  /**
   * The runtimes it advertises now, replacing what it said before. The cost class
   * stored (and shown by the compute reads) is the service's, from the runtime's
   * kind: what the worker advertised for it is not taken (costClassOf).
   */
  /** Stores a machine's runtimes as advertised; answers the subscription windows their rows hold (reported before, kept across reconnects). */
  async setRuntimes(id: MachineIdentity, runtimes: RuntimeAdvert[]): Promise<Map<string, RuntimeLimits>> {
    this.beats.forget(id.machineId);
    const now = this.clock.now();
    // One statement (a hello from each of 10,000 machines after a restart): the runtimes not advertised any more go, the others are upserted. A name said twice: the last one.
    const byName = new Map(runtimes.map((r) => [r.name, r]));
    const rows = [...byName.values()].map((r) => ({ id: randomId("rt_", 20), name: r.name, ...advertised(r) }));
    const stored = await this.db.query<{ name: string; limits: RuntimeLimits | null }>(
      `WITH adv AS (SELECT * FROM jsonb_to_recordset($4::jsonb)
                      AS a(id text, name text, kind text, "costClass" text, models jsonb, "maxConcurrentJobs" int, version text, billing text, supported boolean, note text, unavailable text)),
            gone AS (DELETE FROM runtimes WHERE machine_id = $1 AND NOT (name = ANY (ARRAY(SELECT name FROM adv))))
       INSERT INTO runtimes (id, app_id, environment, machine_id, name, kind, cost_class, models, max_concurrent_jobs, version, billing, supported, note, unavailable, updated_at)
       SELECT a.id, $2, $3::"Environment", $1, a.name, a.kind::"RuntimeKind", a."costClass"::"CostClass", a.models, a."maxConcurrentJobs", a.version, a.billing, a.supported, a.note, a.unavailable, $5::timestamptz
         FROM adv a
       ON CONFLICT (machine_id, name) DO UPDATE SET kind = EXCLUDED.kind, cost_class = EXCLUDED.cost_class, models = EXCLUDED.models, max_concurrent_jobs = EXCLUDED.max_concurrent_jobs,
         version = EXCLUDED.version, billing = EXCLUDED.billing, supported = EXCLUDED.supported, note = EXCLUDED.note, unavailable = EXCLUDED.unavailable, updated_at = EXCLUDED.updated_at
       RETURNING name, limits`,
      [id.machineId, id.appId, id.environment, JSON.stringify(rows), now.toISOString()],
    );
    return new Map(stored.flatMap((r) => (r.limits ? [[r.name, r.limits] as const] : [])));
  }

  /**
   * An agent CLI's subscription windows as the machine last reported them
   * (`runtime_limits`), kept on its runtime's row where routing reads it, so every
   * instance routes around a spent window. A runtime it does not advertise: nothing.
   */
  async setLimits(id: MachineIdentity, runtime: string, limits: RuntimeLimits): Promise<void> {
    const rows = await this.db.query<{ previous: RuntimeLimits | null }>(
      `WITH old AS (SELECT id, limits FROM runtimes WHERE machine_id = $1 AND name = $2 FOR UPDATE)
       UPDATE runtimes SET limits = $3::jsonb FROM old WHERE runtimes.id = old.id RETURNING old.limits AS previous`,
      [id.machineId, runtime, JSON.stringify(limits)],
    );
    if (rows.length) this.windows?.reported(id, runtime, rows[0].previous, limits);
  }

  /**
   * A heartbeat: alive now, with these runtimes busy. Nothing is written unless
   * the busy runtimes changed or its coarse last-seen is due (HeartbeatBatch); a
   * revocation missed by its notification shows at the instance's beat (liveness.ts).
   */
  heartbeat(machineId: string, instance: string, busy: string[]): void {
    this.beats.beat(machineId, instance, busy);
  }

  /** The oldest `alive_at` of an instance whose machines still read online. */
  onlineCutoff(): Date {
    return new Date(this.clock.now().getTime() - this.heartbeatTimeoutSeconds * 1000);
  }

  /** When each instance holding one of these machines' connections last said it is alive (none connected: no statement). */
  private async holders(machines: { connectedInstance: string | null }[]): Promise<Map<string, Date>> {
    const ids = [...new Set(machines.flatMap((m) => (m.connectedInstance ? [m.connectedInstance] : [])))];
    if (ids.length === 0) return new Map();
    const rows = await this.db.query<{ id: string; alive_at: Date | string }>(`SELECT id, alive_at FROM server_instances WHERE id = ANY($1::text[])`, [ids]);
    return new Map(rows.map((r) => [r.id, new Date(r.alive_at)]));
  }

  /** No more heartbeat writes (the instance is shutting down); resolves once one under way ended. */
  stopHeartbeats(): Promise<void> {
    this.windows?.stop();
    return this.beats.stop();
  }

  /** The connection closed: offline at once, unless another instance holds a newer connection. Returns when the ended connection began (null: nothing went offline). */
  async markDisconnected(machineId: string, instance: string): Promise<Date | null> {
    // Last seen: when it was last heard here.
    const heard = this.beats.disconnected(machineId) ?? this.clock.now();
    const rows = await this.prisma.$queryRaw<{ connected_at: Date | null }[]>`
      UPDATE machines SET connected_instance = NULL, last_heartbeat_at = GREATEST(last_heartbeat_at, ${heard})
       WHERE id = ${machineId} AND connected_instance = ${instance} RETURNING connected_at`;
    await this.prisma.runtime.updateMany({ where: { machineId }, data: { busy: false } });
    return rows[0] ? new Date(rows[0].connected_at ?? 0) : null;
  }

  /**
   * `markDisconnected` for many machines at once (an instance shutting down): one
   * statement. Returns when each connection that went offline began (the others,
   * held elsewhere by now, are not named).
   */
  async markAllDisconnected(machineIds: string[], instance: string): Promise<Map<string, Date>> {
    if (machineIds.length === 0) return new Map();
    const now = this.clock.now();
    const heard = machineIds.map((id) => (this.beats.disconnected(id) ?? now).toISOString());
    const rows = await this.db.query<{ id: string; connected_at: Date | string | null }>(
      `WITH gone AS (UPDATE machines m SET connected_instance = NULL, last_heartbeat_at = GREATEST(m.last_heartbeat_at, h.at)
                       FROM unnest($1::text[], $3::timestamptz[]) AS h(id, at)
                      WHERE m.id = h.id AND m.connected_instance = $2 RETURNING m.id, m.connected_at),
            idle AS (UPDATE runtimes SET busy = false WHERE machine_id = ANY($1::text[]) AND busy)
       SELECT id, connected_at FROM gone`,
      [machineIds, instance, heard],
    );
    return new Map(rows.map((r) => [r.id, new Date(r.connected_at ?? 0)]));
  }

  /**
   * Removes a machine of this user: its token stops working at once and the
   * instance holding its connection is woken to close it. Another user's or
   * app's machine is as unknown as a made-up id.
   */
  async revoke(tenant: Tenant, endUserId: string, machineId: string): Promise<{ id: string; revokedAt: string }> {
    const now = this.clock.now();
    // Its connection, read under the row's lock: a machine removed while connected goes offline (a `machine.offline` fact).
    const done = await this.prisma.$queryRaw<{ connected_instance: string | null; connected_at: Date | null }[]>`
      WITH old AS (
        SELECT id, connected_instance, connected_at FROM machines
         WHERE id = ${machineId} AND app_id = ${tenant.appId} AND environment = ${tenant.environment}::"Environment" AND end_user_id = ${endUserId} AND revoked_at IS NULL
         FOR UPDATE)
      UPDATE machines m SET revoked_at = ${now}, connected_instance = NULL FROM old WHERE m.id = old.id
      RETURNING old.connected_instance, old.connected_at`;
    if (done.length !== 1) throw new ApiError("not_found", "No such machine for this user.");
    await this.db.notify(MACHINE_REVOKED_CHANNEL, machineId);
    const was = done[0];
    if (was.connected_instance !== null && was.connected_at !== null) {
      await this.facts?.machineOffline({ ...tenant, endUserId, machineId }, new Date(was.connected_at));
    }
    return { id: machineId, revokedAt: now.toISOString() };
  }

  /** `revoke` for the app's user known by the app's own id. */
  async revokeForExternalUser(tenant: Tenant, externalId: string, machineId: string) {
    const endUserId = await this.endUserIdOf(tenant, externalId);
    if (!endUserId) throw new ApiError("not_found", "No such machine for this user.");
    return this.revoke(tenant, endUserId, machineId);
  }

  /** Our id for the app's user `externalId`, if the app has named them before. */
  private async endUserIdOf(tenant: Tenant, externalId: string): Promise<string | null> {
    const user = await this.prisma.endUser.findUnique({ where: { appId_environment_externalId: { appId: tenant.appId, environment: tenant.environment, externalId } } });
    return user?.id ?? null;
  }

  private view(m: MachineRow, runtimes: RuntimeRow[], holders: Map<string, Date>): z.infer<typeof MachineView> {
    // Online while a live instance holds its connection; seen as recently as that instance last said it is alive (a dead one: when it died).
    const holder = m.connectedInstance !== null ? holders.get(m.connectedInstance) : undefined;
    const connected = holder !== undefined && holder > this.onlineCutoff();
    const lastSeen = holder !== undefined && (m.lastHeartbeatAt === null || holder > m.lastHeartbeatAt) ? holder : m.lastHeartbeatAt;
    const runtimeViews = runtimes.map((r) => {
      const cost = runtimeCost(r.kind, r.billing as Billing | null);
      return {
        name: r.name,
        kind: r.kind,
        costClass: cost.costClass,
        models: Array.isArray(r.models) ? (r.models as string[]) : [],
        version: r.version,
        billing: cost.billing,
        supported: r.supported,
        note: r.note,
        unavailable: r.unavailable ? { reason: r.unavailable as RuntimeUnavailableReason, message: r.note ?? "" } : null,
        state: !connected ? ("offline" as const) : r.busy ? ("busy" as const) : ("online" as const),
        ...(r.limits ? { limits: r.limits as unknown as RuntimeLimits } : {}),
      };
    });
    return {
      id: m.id,
      hostname: m.hostname,
      platform: m.platform,
      arch: m.arch,
      client: m.client,
      state: !connected ? "offline" : runtimeViews.some((r) => r.state === "busy") ? "busy" : "online",
      pairedAt: m.createdAt.toISOString(),
      lastSeenAt: lastSeen?.toISOString() ?? null,
      runtimes: runtimeViews,
    };
  }
}

/** What is stored of a runtime's advert: the cost class is the service's (from the kind), the rest as the machine says it. */
function advertised(r: RuntimeAdvert) {
  const cost = runtimeCost(r.kind, r.billing);
  return {
    kind: r.kind,
    costClass: cost.costClass,
    models: r.models,
    maxConcurrentJobs: r.maxConcurrentJobs ?? null,
    version: r.version ?? null,
    billing: cost.billing,
    // Unavailable runtimes come with `supported: false` (for services that do not know `unavailable`): their version is not the matter.
    supported: r.unavailable ? true : r.supported !== false,
    note: r.unavailable?.message ?? r.note ?? null,
    unavailable: r.unavailable?.reason ?? null,
  };
}
