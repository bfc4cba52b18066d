import type { Request, Response } from "express";
import { initServer } from "@ts-rest/express";
import { serialize } from "cookie";
import { contract, OWNER_SESSION_COOKIE } from "@svc/contract";
import type { RouteServices } from "../app.js";
import { ownerOf } from "../http/principal.js";
import { addressKey } from "../rate-limit/client-address.js";
import type { PublicUrls } from "../public-urls.js";
import type { SignedIn } from "../owners/owners.js";
import { OWNER_SESSION_ABSOLUTE_SECONDS } from "../owners/sessions.js";

const s = initServer();

const addressOf = (req: Request) => addressKey(req.ip ?? req.socket.remoteAddress ?? "unknown");

/** `svc_owner`: HttpOnly, SameSite=Strict, Path=/, Secure when the service is served over https; as long as the session's absolute lifetime. */
function setSessionCookie(res: Response, urls: PublicUrls, token: string | null): void {
  res.setHeader(
    "Set-Cookie",
    serialize(OWNER_SESSION_COOKIE, token ?? "", {
      httpOnly: true,
      sameSite: "strict",
      path: "/",
      secure: urls.base.startsWith("https:"),
      maxAge: token === null ? 0 : OWNER_SESSION_ABSOLUTE_SECONDS,
    }),
  );
  // The sign-in answers carry the CSRF token: no cache keeps them.
  res.setHeader("Cache-Control", "no-store");
}

/** The dashboard's account side: signing in and out, the owner's apps, their keys and members (issue 16). */
export function ownerAccountRoutes({ owners, urls }: RouteServices) {
  const signedIn = (res: Response, r: SignedIn) => {
    setSessionCookie(res, urls, r.session.token);
    return { status: 200 as const, body: r.me };
  };
  return {
    ownerSignIn: s.route(contract.ownerSignIn, async ({ req, res, body }) => signedIn(res, await owners.signIn(body.email, body.password, addressOf(req)))),
    ownerSignInWithLink: s.route(contract.ownerSignInWithLink, async ({ res, body }) => signedIn(res, await owners.signInWithLink(body.token))),
    ownerAcceptInvite: s.route(contract.ownerAcceptInvite, async ({ req, res, body }) => signedIn(res, await owners.acceptInvite(body, addressOf(req)))),
    ownerMe: s.route(contract.ownerMe, async ({ req, res }) => {
      res.setHeader("Cache-Control", "no-store");
      return { status: 200, body: await owners.me(ownerOf(req)) };
    }),
    ownerSignOut: s.route(contract.ownerSignOut, async ({ req, res }) => {
      const signedOut = await owners.signOut(ownerOf(req), false);
      setSessionCookie(res, urls, null);
      return { status: 200, body: { signedOut } };
    }),
    ownerSignOutEverywhere: s.route(contract.ownerSignOutEverywhere, async ({ req, res }) => {
      const signedOut = await owners.signOut(ownerOf(req), true);
      setSessionCookie(res, urls, null);
      return { status: 200, body: { signedOut } };
    }),
    ownerSetPassword: s.route(contract.ownerSetPassword, async ({ req, body }) => ({
      status: 200,
      body: await owners.setPassword(ownerOf(req), body.currentPassword, body.newPassword, addressOf(req)),
    })),
    ownerListApps: s.route(contract.ownerListApps, async ({ req }) => ({ status: 200, body: { data: await owners.members.appsOf(ownerOf(req).ownerId) } })),
    ownerCreateApp: s.route(contract.ownerCreateApp, async ({ req, body }) => ({ status: 201, body: await owners.apps.create(ownerOf(req).ownerId, body.name) })),
    ownerListKeys: s.route(contract.ownerListKeys, async ({ req, params }) => {
      await owners.requireMember(ownerOf(req), params.app);
      return { status: 200, body: { data: await owners.apps.listKeys(params.app) } };
    }),
    ownerCreateKey: s.route(contract.ownerCreateKey, async ({ req, params, body }) => {
      await owners.requireMember(ownerOf(req), params.app, "owner");
      return { status: 201, body: await owners.apps.createKey(params.app, body.environment, body.kind, ownerOf(req).ownerId, body.name) };
    }),
    ownerRotateKey: s.route(contract.ownerRotateKey, async ({ req, params, body }) => {
      await owners.requireMember(ownerOf(req), params.app, "owner");
      return { status: 200, body: await owners.apps.rotateKey(params.app, params.keyId, body.graceSeconds, ownerOf(req).ownerId) };
    }),
    ownerRenameKey: s.route(contract.ownerRenameKey, async ({ req, params, body }) => {
      await owners.requireMember(ownerOf(req), params.app, "owner");
      return { status: 200, body: await owners.apps.renameKey(params.app, params.keyId, body.name) };
    }),
    ownerRevokeKey: s.route(contract.ownerRevokeKey, async ({ req, params }) => {
      await owners.requireMember(ownerOf(req), params.app, "owner");
      return { status: 200, body: await owners.apps.revokeKey(params.app, params.keyId) };
    }),
    ownerListMembers: s.route(contract.ownerListMembers, async ({ req, params }) => {
      await owners.requireMember(ownerOf(req), params.app);
      return { status: 200, body: await owners.memberList(params.app) };
    }),
    ownerCreateInvite: s.route(contract.ownerCreateInvite, async ({ req, params, body }) => {
      const p = ownerOf(req);
      await owners.requireMember(p, params.app, "owner");
      const invite = await owners.invites.create(params.app, p.ownerId, body.role, body.email);
      // The token rides in the fragment, like the sign-in link's: never in a log or a Referer.
      const url = `${urls.base}/dashboard/invite#token=${invite.token}`;
      return { status: 201, body: { id: invite.id, url, email: invite.email, role: invite.role, expiresAt: invite.expiresAt.toISOString() } };
    }),
    ownerRemoveMember: s.route(contract.ownerRemoveMember, async ({ req, params }) => {
      await owners.requireMember(ownerOf(req), params.app, "owner");
      await owners.members.remove(params.app, params.ownerId);
      return { status: 200, body: await owners.memberList(params.app) };
    }),
  };
}
