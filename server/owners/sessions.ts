import { OWNER_SESSION_PREFIX } from "@svc/contract";
import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId, randomToken } from "../crypto.js";

/** A dashboard session ends this long after it began, whatever happens (the cookie's Max-Age). */
export const OWNER_SESSION_ABSOLUTE_SECONDS = 7 * 24 * 60 * 60;
/** ...or this long after its last request. */
export const OWNER_SESSION_IDLE_SECONDS = 24 * 60 * 60;
/** `last_seen_at` is written at most once a minute per session: not a write per request. */
const LAST_SEEN_RESOLUTION_MS = 60_000;

const SESSION_TOKEN = /^ost_[A-Za-z0-9_-]{43}$/;

/** Who a dashboard request acts for (authentication has run). */
export interface OwnerPrincipal {
  ownerId: string;
  sessionId: string;
}

export interface VerifiedOwnerSession extends OwnerPrincipal {
  csrfToken: string;
  expiresAt: Date;
  lastSeenAt: Date;
}

export interface StartedOwnerSession extends VerifiedOwnerSession {
  /** The cookie's value, `ost_...`: returned once, stored only as its hash. */
  token: string;
}

/**
 * Dashboard sessions (`ost_...` in the `svc_owner` cookie). The token is stored as
 * its SHA-256 (256 random bits: a lookup by hash leaks nothing); each session has
 * its own CSRF token, sent back as `X-CSRF-Token` on every request that changes something.
 */
export class OwnerSessions {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  async start(ownerId: string, tx: Pick<Prisma, "ownerSession"> = this.prisma): Promise<StartedOwnerSession> {
    const token = `${OWNER_SESSION_PREFIX}${randomToken(32)}`;
    const csrfToken = randomToken(32);
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + OWNER_SESSION_ABSOLUTE_SECONDS * 1000);
    const id = randomId("osn_", 20);
    await tx.ownerSession.create({ data: { id, ownerId, tokenHash: hashSecret(token), csrfToken, createdAt: now, lastSeenAt: now, expiresAt } });
    return { token, csrfToken, expiresAt, lastSeenAt: now, ownerId, sessionId: id };
  }

  /** The live session of a cookie: unknown is `invalid_credential`, ended, expired or idle too long `session_expired`. */
  async verify(token: string): Promise<VerifiedOwnerSession> {
    if (!SESSION_TOKEN.test(token)) throw new ApiError("invalid_credential", "The dashboard session cookie is malformed: sign in again.");
    const s = await this.prisma.ownerSession.findUnique({ where: { tokenHash: hashSecret(token) } });
    if (!s) throw new ApiError("invalid_credential", "The dashboard session is not known: sign in again.");
    const now = this.clock.now();
    const idleUntil = s.lastSeenAt.getTime() + OWNER_SESSION_IDLE_SECONDS * 1000;
    if (s.endedAt || s.expiresAt <= now || idleUntil <= now.getTime()) {
      throw new ApiError("session_expired", "The dashboard session has expired or has been ended: sign in again.");
    }
    return { ownerId: s.ownerId, sessionId: s.id, csrfToken: s.csrfToken, expiresAt: s.expiresAt, lastSeenAt: s.lastSeenAt };
  }

  /** A request of the session was let through (its CSRF checks too): its idle period starts over. */
  async seen(v: VerifiedOwnerSession): Promise<void> {
    const now = this.clock.now();
    if (now.getTime() - v.lastSeenAt.getTime() < LAST_SEEN_RESOLUTION_MS) return;
    await this.prisma.ownerSession.update({ where: { id: v.sessionId }, data: { lastSeenAt: now } });
  }

  /** Ends one session; says how many ended (0: it had ended already). */
  async end(sessionId: string): Promise<number> {
    const { count } = await this.prisma.ownerSession.updateMany({ where: { id: sessionId, endedAt: null }, data: { endedAt: this.clock.now() } });
    return count;
  }

  /** Ends every live session of an owner but `except`; says how many. */
  async endAll(ownerId: string, except?: string, tx: Pick<Prisma, "ownerSession"> = this.prisma): Promise<number> {
    const now = this.clock.now();
    const { count } = await tx.ownerSession.updateMany({
      where: { ownerId, endedAt: null, expiresAt: { gt: now }, ...(except ? { id: { not: except } } : {}) },
      data: { endedAt: now },
    });
    return count;
  }

  async get(sessionId: string): Promise<VerifiedOwnerSession> {
    const s = await this.prisma.ownerSession.findUniqueOrThrow({ where: { id: sessionId } });
    return { ownerId: s.ownerId, sessionId: s.id, csrfToken: s.csrfToken, expiresAt: s.expiresAt, lastSeenAt: s.lastSeenAt };
  }
}
