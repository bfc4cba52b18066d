import { randomBytes } from "node:crypto";
import { OWNER_SESSION_COOKIE } from "@svc/contract";
import type { TestServer } from "./server.js";
import type { MemberRole } from "../../server/owners/members.js";

export interface SignedInOwner {
  ownerId: string;
  email: string;
  /** `svc_owner=ost_...`, as a Cookie header's value. */
  cookie: string;
  csrf: string;
  /** The raw Set-Cookie of the sign-in. */
  setCookie: string;
  /** `fetch` as the dashboard would: the cookie always, `X-CSRF-Token` on all but GET and HEAD, JSON bodies. */
  fetch(path: string, init?: Omit<RequestInit, "body"> & { body?: unknown }): Promise<Response>;
}

export interface SignInOwnerOptions {
  /** The app the owner is a member of (default: the dev app). `null`: none. */
  appId?: string | null;
  role?: MemberRole;
  email?: string;
}

/** The cookie of a Set-Cookie header, as a Cookie header's `name=value`. */
export function cookieOf(setCookie: string | null): string {
  const m = new RegExp(`(?:^|,\\s*)(${OWNER_SESSION_COOKIE}=[^;]*)`).exec(setCookie ?? "");
  if (!m) throw new Error(`no ${OWNER_SESSION_COOKIE} cookie in ${setCookie}`);
  return m[1];
}

/** A dashboard client from a sign-in answer (password, link or invitation). */
export async function ownerClient(server: Pick<TestServer, "fetch">, res: Response): Promise<Omit<SignedInOwner, "email">> {
  const text = await res.text();
  if (res.status !== 200) throw new Error(`sign-in answered ${res.status}: ${text}`);
  const me = JSON.parse(text);
  const setCookie = res.headers.get("set-cookie") ?? "";
  const cookie = cookieOf(setCookie);
  const csrf: string = me.csrfToken;
  return {
    ownerId: me.owner.id,
    cookie,
    csrf,
    setCookie,
    fetch: (path, init = {}) => {
      const method = (init.method ?? "GET").toUpperCase();
      const headers: Record<string, string> = { cookie, ...(method === "GET" || method === "HEAD" ? {} : { "x-csrf-token": csrf }), ...(init.body !== undefined ? { "content-type": "application/json" } : {}), ...(init.headers as Record<string, string>) };
      return server.fetch(path, { ...init, method, headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
    },
  };
}

/**
 * A new owner account, member of `appId` (the dev app by default) with `role`
 * (default `owner`), signed in through the real HTTP route of a one-time sign-in link.
 */
export async function signInOwner(server: TestServer, opts: SignInOwnerOptions = {}): Promise<SignedInOwner> {
  const { owners } = server.services;
  const email = opts.email ?? `owner-${randomBytes(5).toString("hex")}@example.com`;
  const owner = await owners.accounts.create({ email, name: "Test owner" });
  const appId = opts.appId === undefined ? server.dev.appId : opts.appId;
  if (appId !== null) await owners.members.add(appId, owner.id, opts.role ?? "owner");
  const { token } = await owners.links.create(owner.id);
  const res = await server.fetch("/v1/owner/sign_in/link", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token }) });
  return { ...(await ownerClient(server, res)), email };
}
