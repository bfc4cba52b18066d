/**
 * The four credentials of the service (spec section 5) and which one each route takes.
 *
 * - `appKey`: `Authorization: Bearer sk_svc_<id>.<secret>`, the app's server.
 * - `connectKey`: `pk_svc_<key>` in the path `/c/<pk>/v1/...`, public by design; names the app.
 * - `session`: `Authorization: Bearer est_<token>`, a browser acting for exactly one end user.
 * - `owner`: the dashboard's session cookie `svc_owner` (`ost_<token>`), plus `X-CSRF-Token`
 *   on every request that is not a GET; an app owner acting on the apps they are a member of.
 * - `pairingToken`: `Authorization: Bearer pt_svc_<token>`, a paired machine; it is taken
 *   only by the worker connection, never by an HTTP endpoint of this contract.
 */
export const CREDENTIAL_KINDS = ["appKey", "connectKey", "session", "pairingToken"] as const;
export type CredentialKind = (typeof CREDENTIAL_KINDS)[number];

export const APP_KEY_PREFIX = "sk_svc_";
export const CONNECT_KEY_PREFIX = "pk_svc_";
export const SESSION_TOKEN_PREFIX = "est_";
export const PAIRING_TOKEN_PREFIX = "pt_svc_";

/** Which credential kind a bearer string claims to be, by its prefix; null when none matches. */
export function credentialKindOf(token: string): Exclude<CredentialKind, "connectKey"> | "connectKeyInHeader" | null {
  if (token.startsWith(APP_KEY_PREFIX)) return "appKey";
  if (token.startsWith(SESSION_TOKEN_PREFIX)) return "session";
  if (token.startsWith(PAIRING_TOKEN_PREFIX)) return "pairingToken";
  if (token.startsWith(CONNECT_KEY_PREFIX)) return "connectKeyInHeader";
  return null;
}

/** Typed metadata on every route: the credential it takes, and the issue that builds it while it answers 501. */
export interface RouteMetadata {
  auth: "appKey" | "connectKey" | "session" | "owner" | "none";
  /** Set while the route answers 501 `not_implemented`: what will build it. */
  notBuiltYet?: string;
}

export const meta = (m: RouteMetadata) => m;

/**
 * OpenAPI security schemes: the credentials an HTTP operation takes. The pairing endpoints take
 * none (the connect key is in their path), and the pairing token is taken only by the worker's
 * WebSocket (docs/contributors/worker-protocol.md): neither is a scheme, or generators would send it.
 */
export const SECURITY_SCHEMES = {
  appKey: {
    type: "http",
    scheme: "bearer",
    bearerFormat: "sk_svc_<id>.<secret>",
    description: "App key of one app and environment (`test` or `live`). Create, rotate and revoke with the `svc` CLI.",
  },
  sessionToken: {
    type: "http",
    scheme: "bearer",
    bearerFormat: "est_<token>",
    description: "End-user session minted by the app's server (POST /v1/end_users/session); acts for exactly one end user for ten minutes.",
  },
  ownerSession: {
    type: "apiKey",
    in: "cookie",
    name: "svc_owner",
    description:
      "The app owner's dashboard session (`ost_<token>`), set by the sign-in routes as an HttpOnly, SameSite=Strict cookie. Every request that is not a GET also sends `X-CSRF-Token` with the token from GET /v1/owner/me.",
  },
} as const;
