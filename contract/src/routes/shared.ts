import { initContract } from "@ts-rest/core";
import { z } from "zod";
import { errorResponses, ROUTER_OPTIONS } from "../errors.js";
import { meta } from "../credentials.js";

// What every route group is declared with: the app's (router.ts) and the app owner's (owner-router.ts).

export const c: ReturnType<typeof initContract> = initContract();

export const errors = errorResponses;

/** Every route answers in the envelope, and only with the statuses it lists (and the common ones: bad input, unknown ids, rate limits, crashes). */
export const OPTIONS = ROUTER_OPTIONS;

/** A `text/event-stream` body (ts-rest has no stream type; OpenAPI gets it from here). */
export const eventStream = c.otherResponse({ contentType: "text/event-stream", body: z.string() });

export const runId = z.object({ id: z.string().min(1).max(64) });
export const connectKeyParam = z.object({ pk: z.string().min(1).max(128).describe("The app's connect key, `pk_svc_...`.") });

export const appKeyErrors = errors(401, 403);
export const sessionErrors = errors(401, 403);
export const notBuilt = errors(501);

/** Owner routes: the session cookie, and `X-CSRF-Token` on all but GETs; 403 when the owner is not a member of the app. */
export const ownerErrors = errors(401, 403);
/** Every owner route but the sign-ins. */
export const signedIn = meta({ auth: "owner" });
export const noCredential = meta({ auth: "none" });
/** The prefix of one app environment's owner routes. */
export const ENV = "/v1/owner/apps/:app/env/:env";
export const csv = c.otherResponse({ contentType: "text/csv", body: z.string() });
