import type { Prisma, Tx } from "../db/open.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import type { Bucket, RateLimiter } from "../rate-limit/rate-limiter.js";
import { hashPassword, passwordMatches, spendPasswordCheck } from "./passwords.js";

export interface OwnerView {
  id: string;
  email: string;
  name: string | null;
  hasPassword: boolean;
  createdAt: string;
}

type OwnerRow = { id: string; email: string; name: string | null; passwordHash: string | null; createdAt: Date };

/**
 * Wrong passwords: 10 per email and 30 per client address, each per 15 minutes.
 * A right password counts in neither (a person who signs in often is never locked out).
 */
const SIGN_IN_LIMITS = { perEmail: { max: 10, windowSeconds: 900 }, perAddress: { max: 30, windowSeconds: 900 } };

export const signInBuckets = (email: string, address: string): Bucket[] => [
  { key: `owner-sign-in:email:${email}`, limit: SIGN_IN_LIMITS.perEmail, what: "failed sign-ins for this account" },
  { key: `owner-sign-in:address:${address}`, limit: SIGN_IN_LIMITS.perAddress, what: "failed sign-ins from this address" },
];

export const ownerView = (o: OwnerRow): OwnerView => ({ id: o.id, email: o.email, name: o.name, hasPassword: o.passwordHash !== null, createdAt: o.createdAt.toISOString() });

/** Emails are compared and stored lowercase (the contract lowercases them; the CLI and the database say so too). */
export const normalizeEmail = (email: string) => email.trim().toLowerCase();

/** Owner accounts: who they are and their password. */
export class OwnerAccounts {
  constructor(
    private readonly prisma: Prisma,
    private readonly limiter: RateLimiter,
  ) {}

  /** `created_at` is the database's time (like an app's): it orders accounts as they were made. */
  async create(input: { email: string; name?: string | null; password?: string }, tx: Pick<Tx, "owner"> = this.prisma): Promise<OwnerRow> {
    const passwordHash = input.password === undefined ? null : await hashPassword(input.password);
    return tx.owner.create({ data: { id: randomId("own_", 20), email: normalizeEmail(input.email), name: input.name ?? null, passwordHash } });
  }

  async get(ownerId: string): Promise<OwnerView> {
    return ownerView(await this.prisma.owner.findUniqueOrThrow({ where: { id: ownerId } }));
  }

  findByEmail(email: string, tx: Pick<Tx, "owner"> = this.prisma): Promise<OwnerRow | null> {
    return tx.owner.findUnique({ where: { email: normalizeEmail(email) } });
  }

  /**
   * Email and password. An unknown email, an account without a password and a wrong
   * password are the same 401 after the same work (a dummy hash is checked), and
   * count against the per-email and per-address limits alike.
   */
  async checkPassword(email: string, password: string, address: string): Promise<OwnerRow> {
    const normalized = normalizeEmail(email);
    await this.admitSignIn(normalized, address);
    // The slow hash runs outside the limiter's transaction (which holds the bucket rows): only the count is inside.
    const owner = await this.findByEmail(normalized);
    const ok = owner?.passwordHash ? await passwordMatches(password, owner.passwordHash) : await spendPasswordCheck(password);
    await this.limiter.admit(signInBuckets(normalized, address), async () => ({ result: undefined, count: !ok }));
    if (!ok || !owner) throw new ApiError("invalid_credential", "The email or the password is wrong.");
    return owner;
  }

  /**
   * Refuses (429) before any work when the limits are used up: checked first, so a
   * guesser at the limit learns nothing from a right guess.
   */
  async admitSignIn(email: string, address: string): Promise<void> {
    await this.limiter.admit(signInBuckets(normalizeEmail(email), address), async () => ({ result: undefined, count: false }));
  }

  /** Sets the password; an account that has one must give it (`currentPassword`). */
  async setPassword(ownerId: string, currentPassword: string | undefined, newPassword: string, address: string): Promise<OwnerView> {
    const owner = await this.prisma.owner.findUniqueOrThrow({ where: { id: ownerId } });
    if (owner.passwordHash) {
      await this.admitSignIn(owner.email, address);
      const ok = currentPassword !== undefined && (await passwordMatches(currentPassword, owner.passwordHash));
      await this.limiter.admit(signInBuckets(owner.email, address), async () => ({ result: undefined, count: !ok }));
      if (!ok) throw new ApiError("forbidden", "The current password is wrong (`currentPassword`).", { param: "currentPassword" });
    }
    const updated = await this.prisma.owner.update({ where: { id: ownerId }, data: { passwordHash: await hashPassword(newPassword) } });
    return ownerView(updated);
  }
}
