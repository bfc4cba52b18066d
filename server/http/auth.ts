import type { NextFunction, Request, Response } from "express";
import { credentialKindOf, type RouteMetadata } from "@svc/contract";
import { ApiError } from "../errors.js";
import type { KeyService, Tenant } from "../keys/keys.js";
import type { SessionPrincipal, SessionService } from "../sessions/sessions.js";

/** What authentication established for a request. */
export type Principal =
  | ({ kind: "appKey"; keyId: string } & Tenant)
  | ({ kind: "connectKey" } & Tenant)
  | ({ kind: "session" } & SessionPrincipal)
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
  owner: "This endpoint takes the dashboard's session cookie (svc_owner), not an Authorization header.",
  none: "This endpoint takes no credential.",
} as const;

/**
 * Each route accepts exactly the credential its contract metadata names and
 * nothing else: any other kind is 401 `wrong_credential_kind`, even when valid.
 */
export function authenticate(keys: KeyService, sessions: SessionService) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    try {
      const meta = (req as Request & { tsRestRoute: { metadata: RouteMetadata } }).tsRestRoute.metadata;
      req.principal = await principalFor(meta.auth, req, keys, sessions);
      next();
    } catch (err) {
      next(err);
    }
  };
}

async function principalFor(auth: RouteMetadata["auth"], req: Request, keys: KeyService, sessions: SessionService): Promise<Principal> {
  const header = req.headers.authorization;
  if (auth === "owner") throw new ApiError("not_implemented", "Owner sessions are not built yet (issue 16: the app owner's dashboard).");
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
