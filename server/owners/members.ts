import type { MemberRole } from "@svc/contract";
import type { Prisma, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";

export type { MemberRole };

export interface Membership {
  appId: string;
  role: MemberRole;
}

export interface MemberView {
  owner: { id: string; email: string; name: string | null };
  role: MemberRole;
  joinedAt: string;
}


/** The one answer for an app the owner may not see, whether or not it exists: no existence oracle. */
export const noSuchApp = (appId: string) => new ApiError("not_found", `No app ${appId}.`);

/** Who may act on an app from the dashboard (`app_members`), and as what. */
export class OwnerMembers {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  /**
   * The owner's membership of the app. Not a member: 404 exactly like an app that
   * does not exist. A member without the `role` asked for (only `owner` is ever
   * asked for): 403 `forbidden`.
   */
  async require(ownerId: string, appId: string, role?: MemberRole): Promise<Membership> {
    const m = await this.prisma.appMember.findUnique({ where: { appId_ownerId: { appId, ownerId } } });
    if (!m) throw noSuchApp(appId);
    if (role === "owner" && m.role !== "owner") throw new ApiError("forbidden", "Only members with role `owner` may do this.");
    return { appId: m.appId, role: m.role };
  }

  async add(appId: string, ownerId: string, role: MemberRole, tx: Pick<Tx, "appMember"> = this.prisma): Promise<void> {
    // Joining an app one is already a member of keeps the higher role.
    const existing = await tx.appMember.findUnique({ where: { appId_ownerId: { appId, ownerId } } });
    if (existing) {
      if (existing.role === "member" && role === "owner") await tx.appMember.update({ where: { appId_ownerId: { appId, ownerId } }, data: { role } });
      return;
    }
    await tx.appMember.create({ data: { appId, ownerId, role, joinedAt: this.clock.now() } });
  }

  async list(appId: string): Promise<MemberView[]> {
    const rows = await this.prisma.appMember.findMany({ where: { appId }, include: { owner: true }, orderBy: [{ joinedAt: "asc" }, { ownerId: "asc" }] });
    return rows.map((m) => ({ owner: { id: m.owner.id, email: m.owner.email, name: m.owner.name }, role: m.role, joinedAt: m.joinedAt.toISOString() }));
  }

  /**
   * Removes a member. An owner id that is not a member is 404; the app's last
   * `owner` stays (409 `last_owner`): an app nobody can manage cannot be repaired
   * from the dashboard. The check and the removal hold the app's member rows.
   */
  async remove(appId: string, ownerId: string): Promise<void> {
    await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<{ owner_id: string; role: MemberRole }[]>`SELECT owner_id, role::text AS role FROM app_members WHERE app_id = ${appId} FOR UPDATE`;
      const target = rows.find((r) => r.owner_id === ownerId);
      if (!target) throw new ApiError("not_found", `No member ${ownerId} of this app.`);
      if (target.role === "owner" && rows.filter((r) => r.role === "owner").length === 1) {
        throw new ApiError("last_owner", "This is the app's last member with role `owner`: make another member an owner first (invite one with role `owner`).");
      }
      await tx.appMember.delete({ where: { appId_ownerId: { appId, ownerId } } });
    });
  }

  /** The apps an owner is a member of, oldest first. */
  async appsOf(ownerId: string): Promise<{ id: string; name: string; role: MemberRole; createdAt: string }[]> {
    const rows = await this.prisma.appMember.findMany({ where: { ownerId }, include: { app: true }, orderBy: [{ app: { createdAt: "asc" } }, { appId: "asc" }] });
    return rows.map((m) => ({ id: m.app.id, name: m.app.name, role: m.role, createdAt: m.app.createdAt.toISOString() }));
  }
}
