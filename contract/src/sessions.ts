import { z } from "zod";
import { UserId } from "./common.js";

export const CreateSessionRequest = z.object({
  user: UserId,
  email: z.string().email().max(320).optional(),
});

export const SessionResponse = z.object({
  session: z.string().describe("`est_...` token acting for exactly this user."),
  expires_in: z.number().int().describe("Seconds (600: ten minutes)."),
  url: z.string().url().describe("The hosted connect page for this user; the token rides in the URL fragment, never in a query string."),
  billing_url: z.string().url().describe("The hosted billing page (plans, checkout, machines) for this user, the token in the fragment likewise."),
});

export const EndSessionsQuery = z.object({ user: UserId });
export const EndSessionsResponse = z.object({ user: UserId, ended: z.number().int().describe("How many live sessions were ended.") });
