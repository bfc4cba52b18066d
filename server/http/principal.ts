import type { Request } from "express";
import { ApiError } from "../errors.js";
import type { Tenant } from "../keys/keys.js";
import type { SessionPrincipal } from "../sessions/sessions.js";
import type { OwnerPrincipal } from "../owners/sessions.js";

/** The app and environment an app key or connect key speaks for (authentication has run). */
export function tenantOf(req: Pick<Request, "principal">): Tenant {
  const p = req.principal;
  if (p?.kind === "appKey" || p?.kind === "connectKey") return { appId: p.appId, environment: p.environment };
  throw new ApiError("internal_error", "route without an app credential asked for its tenant");
}

/** The end-user session a browser route acts for. */
export function sessionOf(req: Pick<Request, "principal">): SessionPrincipal {
  const p = req.principal;
  if (p?.kind === "session") return p;
  throw new ApiError("internal_error", "route without a session asked for it");
}

/** The app owner a dashboard route acts for. */
export function ownerOf(req: Pick<Request, "principal">): OwnerPrincipal {
  const p = req.principal;
  if (p?.kind === "owner") return { ownerId: p.ownerId, sessionId: p.sessionId };
  throw new ApiError("internal_error", "route without an owner session asked for it");
}
