import { z } from "zod";
import { AcceptInviteRequest, Owner, OwnerMe, SetPasswordRequest, SignedOut, SignInLinkRequest, SignInRequest } from "../owner.js";
import { c, errors, noCredential, OPTIONS, ownerErrors, signedIn } from "./shared.js";

/** The owner's account: signing in and out, the session, the password. */
export const ownerAccountContract = c.router(
  {
    ownerSignIn: {
      method: "POST",
      path: "/v1/owner/sign_in",
      summary: "Sign in to the dashboard",
      description: "Email and password. Sets the `svc_owner` session cookie (HttpOnly, SameSite=Strict) and returns the CSRF token. Rate-limited per email and per address; a wrong email and a wrong password answer the same 401.",
      body: SignInRequest,
      responses: { 200: OwnerMe, ...errors(401) },
      metadata: noCredential,
    },
    ownerSignInWithLink: {
      method: "POST",
      path: "/v1/owner/sign_in/link",
      summary: "Sign in with a one-time link",
      description: "Redeems an `olt_` token printed by `svc dashboard` (single use, 15 minutes). Sets the session cookie.",
      body: SignInLinkRequest,
      responses: { 200: OwnerMe, ...errors(401) },
      metadata: noCredential,
    },
    ownerAcceptInvite: {
      method: "POST",
      path: "/v1/owner/invites/accept",
      summary: "Accept an invitation to an app",
      description: "Redeems an `oin_` invitation (single use, 7 days): joins the app, creating the account when the email has none. Sets the session cookie.",
      body: AcceptInviteRequest,
      responses: { 200: OwnerMe, ...errors(401) },
      metadata: noCredential,
    },
    ownerMe: {
      method: "GET",
      path: "/v1/owner/me",
      summary: "The signed-in owner",
      description: "The owner, the session's CSRF token and the apps they are a member of.",
      responses: { 200: OwnerMe, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSignOut: {
      method: "POST",
      path: "/v1/owner/sign_out",
      summary: "Sign out",
      body: c.noBody(),
      responses: { 200: SignedOut, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSignOutEverywhere: {
      method: "POST",
      path: "/v1/owner/sign_out_everywhere",
      summary: "Sign out of every session",
      description: "Ends every session of this owner, on every browser, this one included.",
      body: c.noBody(),
      responses: { 200: SignedOut, ...ownerErrors },
      metadata: signedIn,
    },
    ownerSetPassword: {
      method: "PUT",
      path: "/v1/owner/password",
      summary: "Set or change the password",
      description: "Ends the owner's other sessions.",
      body: SetPasswordRequest,
      responses: { 200: Owner, ...ownerErrors },
      metadata: signedIn,
    },
  },
  OPTIONS,
);
