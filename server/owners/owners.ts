import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import { ApiError } from "../errors.js";
import type { RateLimiter } from "../rate-limit/rate-limiter.js";
import { OwnerAccounts, normalizeEmail, ownerView, type OwnerView } from "./accounts.js";
import { OwnerSessions, type StartedOwnerSession, type OwnerPrincipal } from "./sessions.js";
import type { MemberRole } from "@svc/contract";
import { OwnerMembers } from "./members.js";
import { OwnerSignInLinks } from "./links.js";
import { OwnerInvites } from "./invites.js";
import { OwnerApps } from "./apps.js";
import type { KeyService } from "../keys/keys.js";

/** The account `svc dashboard` and the first-start banner make when there is no owner yet. */
export const LOCAL_OWNER_EMAIL = "owner@svc.localhost";

export interface OwnerMeView {
  owner: OwnerView;
  csrfToken: string;
  sessionExpiresAt: string;
  apps: { id: string; name: string; role: MemberRole; createdAt: string }[];
}

/** A sign-in's outcome: the cookie's token (set by the route) and what `GET /v1/owner/me` would answer. */
export interface SignedIn {
  session: StartedOwnerSession;
  me: OwnerMeView;
}

/**
 * The app owners' side (the dashboard, issue 16): accounts, sessions, memberships,
 * one-time sign-in links and invitations. Each concept is its own module; this
 * one holds what spans them (signing in ends in a session, an invitation in a
 * membership and a session).
 */
export class OwnerService {
  readonly accounts: OwnerAccounts;
  readonly sessions: OwnerSessions;
  readonly members: OwnerMembers;
  readonly links: OwnerSignInLinks;
  readonly invites: OwnerInvites;
  readonly apps: OwnerApps;

  constructor(
    private readonly prisma: Prisma,
    clock: Clock,
    limiter: RateLimiter,
    keys: KeyService,
  ) {
    this.accounts = new OwnerAccounts(prisma, limiter);
    this.sessions = new OwnerSessions(prisma, clock);
    this.members = new OwnerMembers(prisma, clock);
    this.links = new OwnerSignInLinks(prisma, clock);
    this.invites = new OwnerInvites(prisma, clock);
    this.apps = new OwnerApps(keys, this.members, prisma);
  }

  /**
   * Every per-app route starts here: the owner's membership of `appId`. Not a
   * member: 404 `not_found`, exactly like an app that does not exist (no
   * existence oracle); a `member` where `role: "owner"` is asked: 403 `forbidden`.
   */
  requireMember(p: OwnerPrincipal, appId: string, role?: MemberRole) {
    return this.members.require(p.ownerId, appId, role);
  }

  async me(p: OwnerPrincipal): Promise<OwnerMeView> {
    const [owner, session, apps] = await Promise.all([this.accounts.get(p.ownerId), this.sessions.get(p.sessionId), this.members.appsOf(p.ownerId)]);
    return { owner, csrfToken: session.csrfToken, sessionExpiresAt: session.expiresAt.toISOString(), apps };
  }

  private async signedIn(session: StartedOwnerSession): Promise<SignedIn> {
    return { session, me: await this.me(session) };
  }

  async signIn(email: string, password: string, address: string): Promise<SignedIn> {
    const owner = await this.accounts.checkPassword(email, password, address);
    return this.signedIn(await this.sessions.start(owner.id));
  }

  async signInWithLink(token: string): Promise<SignedIn> {
    const session = await this.prisma.$transaction(async (tx) => this.sessions.start(await this.links.redeem(tx, token), tx));
    return this.signedIn(session);
  }

  /**
   * Joins the invitation's app. A new email: the account is made (a password is
   * required). An existing account proves itself with its password first (the
   * invitation is not spent by a wrong one).
   */
  async acceptInvite(input: { token: string; email: string; name?: string; password?: string }, address: string): Promise<SignedIn> {
    const email = normalizeEmail(input.email);
    // The invitation first: without a live one nothing is said about the email (whether it has an account).
    await this.invites.check(input.token, email);
    const existing = await this.accounts.findByEmail(email);
    if (existing) {
      await this.accounts.checkPassword(email, input.password ?? "", address);
    } else if (input.password === undefined) {
      throw new ApiError("invalid_request", "No account has this email yet: choose a `password` (at least 10 characters) to create it.", { param: "password" });
    }
    const session = await this.prisma.$transaction(async (tx) => {
      const { appId, role } = await this.invites.redeem(tx, input.token, email);
      const owner = existing ?? (await this.accounts.create({ email, name: input.name, password: input.password }, tx));
      await this.members.add(appId, owner.id, role, tx);
      return this.sessions.start(owner.id, tx);
    });
    return this.signedIn(session);
  }

  /** The app's members and its open invitations. */
  async memberList(appId: string) {
    const [data, invites] = await Promise.all([this.members.list(appId), this.invites.listOpen(appId)]);
    return { data, invites };
  }

  /** Ends this session (`everywhere`: every session of the owner); says how many ended. */
  signOut(p: OwnerPrincipal, everywhere: boolean): Promise<number> {
    return everywhere ? this.sessions.endAll(p.ownerId) : this.sessions.end(p.sessionId);
  }

  /** Sets the password and ends the owner's other sessions (this one stays). */
  async setPassword(p: OwnerPrincipal, currentPassword: string | undefined, newPassword: string, address: string): Promise<OwnerView> {
    const owner = await this.accounts.setPassword(p.ownerId, currentPassword, newPassword, address);
    await this.sessions.endAll(p.ownerId, p.sessionId);
    return owner;
  }

  /**
   * What `svc dashboard` and the first-start banner hand out: a one-time sign-in
   * link for the operator, who holds the data folder or the database and so every
   * app already. The owner is `email`'s account, else the first member with role
   * `owner` of the oldest app, else the first account; with none at all, a local
   * account (`owner@svc.localhost`, or `email`) is made. The chosen owner becomes
   * an `owner` of every app that has no member yet (apps made by `svc apps create`).
   */
  async operatorSignInLink(email?: string): Promise<{ token: string; expiresAt: string; email: string; created: boolean }> {
    const { owner, created } = await this.prisma.$transaction(async (tx) => {
      let owner = email ? await this.accounts.findByEmail(email, tx) : null;
      if (email && !owner && (await tx.owner.count()) > 0) {
        throw new ApiError("not_found", `No owner account has the email ${normalizeEmail(email)}: sign in as an existing owner and invite it from the dashboard.`);
      }
      if (!owner && !email) {
        const first = await tx.appMember.findFirst({ where: { role: "owner" }, orderBy: [{ app: { createdAt: "asc" } }, { joinedAt: "asc" }, { owner: { createdAt: "asc" } }], include: { owner: true } });
        owner = first?.owner ?? (await tx.owner.findFirst({ orderBy: { createdAt: "asc" } }));
      }
      const created = !owner;
      owner ??= await this.accounts.create({ email: email ?? LOCAL_OWNER_EMAIL, name: "Local owner" }, tx);
      const orphans = await tx.app.findMany({ where: { members: { none: {} } }, select: { id: true } });
      for (const app of orphans) await this.members.add(app.id, owner.id, "owner", tx);
      return { owner, created };
    });
    const link = await this.links.create(owner.id);
    return { token: link.token, expiresAt: link.expiresAt.toISOString(), email: ownerView(owner).email, created };
  }
}
