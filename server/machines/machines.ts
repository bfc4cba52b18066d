import type { z } from "zod";
import type { Machine as MachineView } from "@svc/contract";
import type { Notifications, Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import type { RuntimeAdvert } from "@svc/contract";
import type { WebhookFacts } from "../webhooks/facts.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId } from "../crypto.js";
import { runtimeCost, type Billing } from "../ledger/metering.js";

/**
 * A machine counts as online while its connection's heartbeats keep coming: one
 * that vanished without a goodbye goes offline once this much time passes
 * (`WORKER_HEARTBEAT_TIMEOUT_SECONDS` may shorten it, never lengthen it).
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
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
    private readonly notifications: Notifications,
    private readonly facts: WebhookFacts | null = null,
    /** Heartbeats older than this: offline (the connection's holder closes it then too). */
    private readonly heartbeatTimeoutSeconds = HEARTBEAT_TIMEOUT_SECONDS,
  ) {}

  async listForUser(tenant: Tenant, endUserId: string): Promise<z.infer<typeof MachineView>[]> {
    const rows = await this.prisma.machine.findMany({
      where: { appId: tenant.appId, environment: tenant.environment, endUserId, revokedAt: null },
      include: { runtimes: { orderBy: { name: "asc" } } },
      orderBy: { createdAt: "asc" },
    });
    return rows.map((m) => this.view(m, m.runtimes));
  }

  /** A machine of the tenant by its id, removed ones too (a run's machine may have been removed since); null when unknown. */
  async find(tenant: Tenant, machineId: string): Promise<z.infer<typeof MachineView> | null> {
    const m = await this.prisma.machine.findFirst({
      where: { id: machineId, appId: tenant.appId, environment: tenant.environment },
      include: { runtimes: { orderBy: { name: "asc" } } },
    });
    return m ? this.view(m, m.runtimes) : null;
  }

  /** The machines of the app's user `externalId` (none when the app has no such user yet). */
  async listForExternalUser(tenant: Tenant, externalId: string): Promise<z.infer<typeof MachineView>[]> {
    const endUserId = await this.endUserIdOf(tenant, externalId);
    return endUserId ? this.listForUser(tenant, endUserId) : [];
  }

  /** Who a pairing token speaks for; refused when unknown or revoked. */
  async verifyToken(token: string): Promise<MachineIdentity> {
    if (!PAIRING_TOKEN.test(token)) throw new ApiError("invalid_credential", "The pairing token is malformed.");
    const m = await this.prisma.machine.findUnique({ where: { tokenHash: hashSecret(token) }, include: { endUser: { include: { app: true } } } });
    if (!m) throw new ApiError("invalid_credential", "The pairing token is not known.");
    if (m.revokedAt) throw new ApiError("revoked_credential", "This machine was removed: pair it again.");
    return { machineId: m.id, appId: m.appId, environment: m.environment, endUserId: m.endUserId, hostname: m.hostname, appName: m.endUser.app.name };
  }

  /**
   * The machine's connection is held by `instance` from now on; null when the
   * machine was removed meanwhile. Says what it was before (one locked read-and-write):
   * online through a live connection, or offline, and since when its last connection was held.
   */
  async markConnected(machineId: string, instance: string): Promise<{ connectedAt: Date; wasOnline: boolean; previousConnectedAt: Date | null } | null> {
    const now = this.clock.now();
    const staleBefore = new Date(now.getTime() - this.heartbeatTimeoutSeconds * 1000);
    const rows = await this.prisma.$queryRaw<{ was_online: boolean; previous_connected_at: Date | null }[]>`
      WITH old AS (SELECT id, connected_instance, connected_at, last_heartbeat_at FROM machines WHERE id = ${machineId} AND revoked_at IS NULL FOR UPDATE)
      UPDATE machines m SET connected_instance = ${instance}, connected_at = ${now}, last_heartbeat_at = ${now} FROM old WHERE m.id = old.id
      RETURNING (old.connected_instance IS NOT NULL AND old.last_heartbeat_at > ${staleBefore}) AS was_online,
                CASE WHEN old.connected_instance IS NOT NULL THEN old.connected_at END AS previous_connected_at`;
    const r = rows[0];
    return r ? { connectedAt: now, wasOnline: r.was_online, previousConnectedAt: r.previous_connected_at ? new Date(r.previous_connected_at) : null } : null;
  }

  /**
   * The runtimes it advertises now, replacing what it said before. The cost class
   * stored (and shown by the compute reads) is the service's, from the runtime's
   * kind: what the worker advertised for it is not taken (costClassOf).
   */
  async setRuntimes(id: MachineIdentity, runtimes: RuntimeAdvert[]): Promise<void> {
    const now = this.clock.now();
    await this.prisma.$transaction(async (tx) => {
      await tx.runtime.deleteMany({ where: { machineId: id.machineId, name: { notIn: runtimes.map((r) => r.name) } } });
      for (const r of runtimes) {
        await tx.runtime.upsert({
          where: { machineId_name: { machineId: id.machineId, name: r.name } },
          create: { id: randomId("rt_", 20), appId: id.appId, environment: id.environment, machineId: id.machineId, name: r.name, ...advertised(r), updatedAt: now },
          update: { ...advertised(r), updatedAt: now },
        });
      }
    });
  }

  /** A heartbeat: alive now, with these runtimes busy. Says whether the machine is still paired (a revocation missed by its notification shows here). */
  async heartbeat(machineId: string, instance: string, busy: string[]): Promise<{ revoked: boolean }> {
    const now = this.clock.now();
    const moved = await this.prisma.machine.updateMany({ where: { id: machineId, connectedInstance: instance, revokedAt: null }, data: { lastHeartbeatAt: now } });
    await this.prisma.runtime.updateMany({ where: { machineId, name: { in: busy } }, data: { busy: true } });
    await this.prisma.runtime.updateMany({ where: { machineId, name: { notIn: busy } }, data: { busy: false } });
    if (moved.count === 1) return { revoked: false };
    const m = await this.prisma.machine.findUnique({ where: { id: machineId } });
    return { revoked: !m || m.revokedAt !== null };
  }

  /** The connection closed: offline at once, unless another instance holds a newer connection. Returns when the ended connection began (null: nothing went offline). */
  async markDisconnected(machineId: string, instance: string): Promise<Date | null> {
    const rows = await this.prisma.$queryRaw<{ connected_at: Date | null }[]>`
      UPDATE machines SET connected_instance = NULL WHERE id = ${machineId} AND connected_instance = ${instance} RETURNING connected_at`;
    await this.prisma.runtime.updateMany({ where: { machineId }, data: { busy: false } });
    return rows[0] ? new Date(rows[0].connected_at ?? 0) : null;
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
    await this.notifications.notify(MACHINE_REVOKED_CHANNEL, machineId);
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

  private view(m: MachineRow, runtimes: RuntimeRow[]): z.infer<typeof MachineView> {
    const connected =
      m.connectedInstance !== null &&
      m.lastHeartbeatAt !== null &&
      this.clock.now().getTime() - m.lastHeartbeatAt.getTime() < this.heartbeatTimeoutSeconds * 1000;
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
        state: !connected ? ("offline" as const) : r.busy ? ("busy" as const) : ("online" as const),
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
      lastSeenAt: m.lastHeartbeatAt?.toISOString() ?? null,
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
    supported: r.supported !== false,
    note: r.note ?? null,
  };
}
