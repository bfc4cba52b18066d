import { ensureEndUser } from "../users/end-users.js";
import { SESSION_TOKEN_PREFIX } from "@svc/contract";
import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";
import { hashSecret, randomId, randomToken } from "../crypto.js";
import type { Tenant } from "../keys/keys.js";

/** The spec's session lifetime: ten minutes. */
export const SESSION_TTL_SECONDS = 600;

const SESSION_TOKEN = /^est_[A-Za-z0-9_-]{43}$/;

export interface SessionPrincipal extends Tenant {
  sessionId: string;
  endUserId: string;
  /** The app's own id for the user. */
  user: string;
}

/**
 * End-user browser sessions (`est_...`): each acts for exactly one end user of one
 * app and environment, for ten minutes. Only the token's hash is stored; a token is
 * found by its hash (it carries 256 random bits, so a lookup leaks nothing useful).
 */
export class SessionService {
  constructor(
    private readonly prisma: Prisma,
    private readonly clock: Clock,
  ) {}

  async mint(tenant: Tenant, user: string, email?: string): Promise<{ token: string; expiresAt: Date }> {
    const token = `${SESSION_TOKEN_PREFIX}${randomToken(32)}`;
    const expiresAt = new Date(this.clock.now().getTime() + SESSION_TTL_SECONDS * 1000);
    await this.prisma.$transaction(async (tx) => {
      const endUser = { id: await ensureEndUser(tx, tenant, user, email) };
      await tx.endUserSession.create({
        data: { id: randomId("ses_", 20), ...tenant, endUserId: endUser.id, tokenHash: hashSecret(token), expiresAt },
      });
    });
    return { token, expiresAt };
  }

  /** Ends every live session of one user of this app and environment; says how many. */
  async endAll(tenant: Tenant, user: string): Promise<number> {
    const ended = await this.prisma.endUserSession.updateMany({
      where: { appId: tenant.appId, environment: tenant.environment, endUser: { externalId: user }, endedAt: null, expiresAt: { gt: this.clock.now() } },
      data: { endedAt: this.clock.now() },
    });
    return ended.count;
  }

  async verify(token: string): Promise<SessionPrincipal> {
    if (!SESSION_TOKEN.test(token)) throw new ApiError("invalid_credential", "The session token is malformed.");
    const s = await this.prisma.endUserSession.findUnique({ where: { tokenHash: hashSecret(token) }, include: { endUser: true } });
    if (!s) throw new ApiError("invalid_credential", "The session token is not known.");
    // One code for both (clients keyed on it keep working); the message says which, and the connect page shows the matching words.
    if (s.endedAt) throw new ApiError("session_expired", "The session was ended by the app: ask the app for a new one.");
    if (s.expiresAt <= this.clock.now()) throw new ApiError("session_expired", "The session has expired: ask the app for a new one.");
    return { sessionId: s.id, appId: s.appId, environment: s.environment, endUserId: s.endUserId, user: s.endUser.externalId };
  }
}
