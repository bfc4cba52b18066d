import { timingSafeEqual } from "node:crypto";
import type { NextFunction, Request, Response } from "express";
import { parse as parseCookies } from "cookie";
import { credentialKindOf, OWNER_CSRF_HEADER, OWNER_SESSION_COOKIE, type RouteMetadata } from "@svc/contract";
import { ApiError } from "../errors.js";
import type { KeyService, Tenant } from "../keys/keys.js";
import type { SessionPrincipal, SessionService } from "../sessions/sessions.js";
import type { OwnerPrincipal, OwnerSessions } from "../owners/sessions.js";
import type { PublicUrls } from "../public-urls.js";

/** What authentication established for a request. */
export type Principal =
  | ({ kind: "appKey"; keyId: string } & Tenant)
  | ({ kind: "connectKey" } & Tenant)
  | ({ kind: "session" } & SessionPrincipal)
  | ({ kind: "owner" } & OwnerPrincipal)
  | { kind: "none" };

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      principal?: Principal;
    }
  }
}

const KIND_NAMES = {
  appKey: "an app key (sk_svc_...)",
  session: "an end-user session token (est_...)",
  pairingToken: "a pairing token (pt_svc_...)",
  connectKeyInHeader: "a connect key (pk_svc_...), which belongs in the pairing path, not in a header",
} as const;

const EXPECTED = {
  appKey: "This endpoint takes an app key: Authorization: Bearer sk_svc_<id>.<secret>.",
  session: "This endpoint takes an end-user session: Authorization: Bearer est_<token>.",
  connectKey: "This endpoint takes no credential in a header: the connect key in its path names the app.",
  owner: "This endpoint belongs to the owner's dashboard: it takes the session cookie (svc_owner) the dashboard gets when you sign in, not an Authorization header.",
  none: "This endpoint takes no credential.",
} as const;

/**
 * Each route accepts exactly the credential its contract metadata names and
 * nothing else: any other kind is 401 `wrong_credential_kind`, even when valid.
 */
export interface Authenticators {
  keys: KeyService;
  sessions: SessionService;
  ownerSessions: OwnerSessions;
  urls: PublicUrls;
}

export function authenticate(a: Authenticators) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    try {
      const meta = (req as Request & { tsRestRoute: { metadata: RouteMetadata } }).tsRestRoute.metadata;
      req.principal = meta.auth === "owner" ? await ownerPrincipal(req, a.ownerSessions, a.urls) : await principalFor(meta.auth, req, a.keys, a.sessions);
      next();
    } catch (err) {
      next(err);
    }
  };
}

async function principalFor(auth: Exclude<RouteMetadata["auth"], "owner">, req: Request, keys: KeyService, sessions: SessionService): Promise<Principal> {
  const header = req.headers.authorization;
  if (auth === "connectKey" || auth === "none") {
    if (header !== undefined) throw new ApiError("wrong_credential_kind", EXPECTED[auth]);
    if (auth === "none") return { kind: "none" };
    return { kind: "connectKey", ...(await keys.resolveConnectKey(String(req.params.pk))) };
  }
  if (header === undefined || header.trim() === "") throw new ApiError("missing_credential", EXPECTED[auth]);
  const m = /^Bearer +(\S+)\s*$/i.exec(header);
  if (!m) throw new ApiError("invalid_credential", `The Authorization header must be "Bearer <token>". ${EXPECTED[auth]}`);
  const token = m[1];
  const kind = credentialKindOf(token);
  if (kind === null) throw new ApiError("invalid_credential", `The credential is not of any known kind. ${EXPECTED[auth]}`);
  if (kind !== auth) throw new ApiError("wrong_credential_kind", `${EXPECTED[auth]} It was sent ${KIND_NAMES[kind]}.`);
  if (auth === "appKey") return { kind: "appKey", ...(await keys.verifyAppKey(token)) };
  return { kind: "session", ...(await sessions.verify(token)) };
}

/** Methods that change nothing: they need the cookie only. */
const SAFE_METHODS = new Set(["GET", "HEAD"]);

/**
 * The dashboard's credential: the `svc_owner` cookie. An Authorization header on an
 * owner route is the wrong kind (the dashboard never sends one). On every request
 * that is not a GET or HEAD, two CSRF defences on top of SameSite=Strict: an
 * `Origin` header, when sent, must be the service's own, and `X-CSRF-Token` must
 * equal the session's token (compared in constant time); either failing is 403.
 */
async function ownerPrincipal(req: Request, ownerSessions: OwnerSessions, urls: PublicUrls): Promise<Principal> {
  const header = req.headers.authorization;
  if (header !== undefined) throw new ApiError("wrong_credential_kind", `${EXPECTED.owner}${sentInHeader(header)} ${howToSignIn(urls.base)}`);
  const token = req.headers.cookie ? parseCookies(req.headers.cookie)[OWNER_SESSION_COOKIE] : undefined;
  if (!token) throw new ApiError("missing_credential", `${EXPECTED.owner} ${howToSignIn(urls.base)}`);
  const session = await ownerSessions.verify(token);
  if (!SAFE_METHODS.has(req.method)) {
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== new URL(urls.base).origin) {
      throw new ApiError("forbidden", `A cross-site request is refused: its Origin (${origin.slice(0, 200)}) is not this service's.`);
    }
    if (req.headers["sec-fetch-site"] === "cross-site") throw new ApiError("forbidden", "A cross-site request is refused (Sec-Fetch-Site: cross-site).");
    const presented = req.get(OWNER_CSRF_HEADER);
    if (!presented) throw new ApiError("forbidden", "This request changes something: send the header X-CSRF-Token with the csrfToken from GET /v1/owner/me.");
    if (!sameSecret(presented, session.csrfToken)) throw new ApiError("forbidden", "The X-CSRF-Token header does not match this session's csrfToken (GET /v1/owner/me).");
  }
  await ownerSessions.seen(session);
  return { kind: "owner", ownerId: session.ownerId, sessionId: session.sessionId };
}

/** What an owner route was sent in its Authorization header, when it is a credential of a known kind (an app key: for the API, not the dashboard). */
function sentInHeader(header: string): string {
  const token = /^Bearer +(\S+)\s*$/i.exec(header)?.[1];
  const kind = token ? credentialKindOf(token) : null;
  if (kind === null) return "";
  return kind === "appKey" ? ` It was sent ${KIND_NAMES.appKey}: app keys are for the API (/v1/runs, /v1/users, /v1/usage, ...), not for /v1/owner.` : ` It was sent ${KIND_NAMES[kind]}.`;
}

/** How an app owner signs in, said in each owner route's 401: the dashboard's address, the first start's link, the CLI command making another. */
function howToSignIn(base: string): string {
  return `To sign in, open ${base}/dashboard and use your email and password, or the one-time sign-in link the first \`npm start\` printed (it works once, within 15 minutes); \`npx svc dashboard\`, run in the service's folder, prints a new one.`;
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return x.length === y.length && timingSafeEqual(x, y);
}
