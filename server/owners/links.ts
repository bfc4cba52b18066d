import { OWNER_SIGN_IN_LINK_PREFIX } from "@svc/contract";
import type { Prisma, Tx } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId, randomToken } from "../crypto.js";

/** A one-time sign-in link lives fifteen minutes. */
export const SIGN_IN_LINK_SECONDS = 15 * 60;


/**
 * One-time sign-in links (`olt_...`), made by `svc dashboard` and the first-start
 * banner for whoever holds the data folder or the database. Stored as their SHA-256;
 * single use; fifteen minutes. The link carries the token in its fragment
 * (`/dashboard/sign-in#token=olt_...`), which no browser sends to a server.
 */
export class OwnerSignInLinks {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  async create(ownerId: string): Promise<{ token: string; expiresAt: Date }> {
    const token = `${OWNER_SIGN_IN_LINK_PREFIX}${randomToken(32)}`;
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + SIGN_IN_LINK_SECONDS * 1000);
    await this.prisma.ownerSignInLink.create({ data: { id: randomId("oln_", 20), tokenHash: hashSecret(token), ownerId, createdAt: now, expiresAt } });
    return { token, expiresAt };
  }

  /** Spends a link (in `tx`): its owner. Unknown, used and expired links are one answer, 401 `invalid_credential`. */
  async redeem(tx: Tx, token: string): Promise<string> {
    const now = this.clock.now();
    // One statement decides: two redeems of the same link cannot both win.
    const spent = await tx.ownerSignInLink.updateManyAndReturn({
      where: { tokenHash: hashSecret(token), usedAt: null, expiresAt: { gt: now } },
      data: { usedAt: now },
    });
    if (spent.length !== 1) throw new ApiError("invalid_credential", "This sign-in link is unknown, used or expired: run `svc dashboard` for a new one.");
    return spent[0].ownerId;
  }
}
