import { OWNER_INVITE_PREFIX } from "@svc/contract";
import type { Prisma, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId, randomToken } from "../crypto.js";
import type { MemberRole } from "@svc/contract";
import { normalizeEmail } from "./accounts.js";

const invalidInvite = () => new ApiError("invalid_credential", "This invitation is unknown, used, expired or for another email: ask for a new one.");

/** An invitation lives seven days. */
export const INVITE_SECONDS = 7 * 24 * 60 * 60;


export interface OpenInvite {
  id: string;
  email: string | null;
  role: MemberRole;
  expiresAt: string;
  createdAt: string;
}

/** Invitations to an app (`oin_...`, stored as their SHA-256): single use, seven days, optionally for one email. */
export class OwnerInvites {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  async create(appId: string, createdBy: string, role: MemberRole, email: string | undefined): Promise<{ id: string; token: string; email: string | null; role: MemberRole; expiresAt: Date }> {
    const token = `${OWNER_INVITE_PREFIX}${randomToken(32)}`;
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + INVITE_SECONDS * 1000);
    const id = randomId("inv_", 20);
    const bound = email === undefined ? null : normalizeEmail(email);
    await this.prisma.ownerInvite.create({ data: { id, tokenHash: hashSecret(token), appId, email: bound, role, createdBy, createdAt: now, expiresAt } });
    return { id, token, email: bound, role, expiresAt };
  }

  async listOpen(appId: string): Promise<OpenInvite[]> {
    const rows = await this.prisma.ownerInvite.findMany({ where: { appId, usedAt: null, expiresAt: { gt: this.clock.now() } }, orderBy: [{ createdAt: "asc" }, { id: "asc" }] });
    return rows.map((i) => ({ id: i.id, email: i.email, role: i.role, expiresAt: i.expiresAt.toISOString(), createdAt: i.createdAt.toISOString() }));
  }

  /** Whether the invitation is live for `email`, without spending it: the same 401 as `redeem` when not. */
  async check(token: string, email: string): Promise<void> {
    const live = await this.prisma.ownerInvite.count({
      where: { tokenHash: hashSecret(token), usedAt: null, expiresAt: { gt: this.clock.now() }, OR: [{ email: null }, { email: normalizeEmail(email) }] },
    });
    if (live !== 1) throw invalidInvite();
  }

  /**
   * Spends an invitation for `email` (in `tx`): its app and role. Unknown, used,
   * expired, and bound to another email are one answer, 401 `invalid_credential`
   * (an invitation is the credential of the accept route).
   */
  async redeem(tx: Tx, token: string, email: string): Promise<{ appId: string; role: MemberRole }> {
    const now = this.clock.now();
    const spent = await tx.ownerInvite.updateManyAndReturn({
      where: { tokenHash: hashSecret(token), usedAt: null, expiresAt: { gt: now }, OR: [{ email: null }, { email: normalizeEmail(email) }] },
      data: { usedAt: now },
    });
    if (spent.length !== 1) throw invalidInvite();
    return { appId: spent[0].appId, role: spent[0].role };
  }
}
