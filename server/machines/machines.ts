import type { z } from "zod";
import type { Machine as MachineView } from "@svc/contract";
import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";

/**
 * A machine counts as online while its connection's heartbeats keep coming: one
 * that vanished without a goodbye goes offline once this much time passes.
 */
export const HEARTBEAT_TIMEOUT_SECONDS = 45;

type MachineRow = NonNullable<Awaited<ReturnType<Prisma["machine"]["findFirst"]>>>;
type RuntimeRow = Awaited<ReturnType<Prisma["runtime"]["findMany"]>>[number];

/** Paired machines and their live state, always for one user of one app and environment. */
export class MachineService {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  async listForUser(tenant: Tenant, endUserId: string): Promise<z.infer<typeof MachineView>[]> {
    const rows = await this.prisma.machine.findMany({
      where: { appId: tenant.appId, environment: tenant.environment, endUserId, revokedAt: null },
      include: { runtimes: { orderBy: { name: "asc" } } },
      orderBy: { createdAt: "asc" },
    });
    return rows.map((m) => this.view(m, m.runtimes));
  }

  private view(m: MachineRow, runtimes: RuntimeRow[]): z.infer<typeof MachineView> {
    const connected =
      m.connectedInstance !== null &&
      m.lastHeartbeatAt !== null &&
      this.clock.now().getTime() - m.lastHeartbeatAt.getTime() < HEARTBEAT_TIMEOUT_SECONDS * 1000;
    const runtimeViews = runtimes.map((r) => ({
      name: r.name,
      kind: r.kind,
      costClass: r.costClass,
      models: Array.isArray(r.models) ? (r.models as string[]) : [],
      state: !connected ? ("offline" as const) : r.busy ? ("busy" as const) : ("online" as const),
    }));
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
