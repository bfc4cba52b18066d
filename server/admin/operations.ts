import { z } from "zod";
import { Environment } from "@svc/contract";
import { DEFAULT_ROTATION_GRACE_SECONDS, type KeyService } from "../keys/keys.js";
import type { OwnerService } from "../owners/owners.js";

/** What the operations act on, and where the service is reached (for the links they print). */
export interface OperationDeps {
  keys: KeyService;
  owners: OwnerService;
  baseUrl: string;
}

/** The link a one-time sign-in token is handed out in: the token in the fragment, which never reaches a server's log or a Referer. */
export const signInLinkUrl = (baseUrl: string, token: string) => `${baseUrl}/dashboard/sign-in#token=${token}`;

/**
 * What an app owner can do to apps and keys. The CLI calls these directly when it
 * holds the database, or through the running server's admin socket when the server
 * does: one definition, two transports.
 */
export const OPERATIONS = {
  "apps.create": z.object({ name: z.string().min(1).max(200), environment: Environment.default("test") }),
  "apps.list": z.object({}),
  "keys.create": z.object({ appId: z.string().min(1), environment: Environment }),
  "keys.list": z.object({ appId: z.string().min(1) }),
  "keys.rotate": z.object({ key: z.string().min(1), graceSeconds: z.number().int().min(0).max(30 * 86400).default(DEFAULT_ROTATION_GRACE_SECONDS) }),
  "keys.revoke": z.object({ key: z.string().min(1) }),
  "owners.signInLink": z.object({ email: z.string().trim().toLowerCase().email().max(254).optional() }),
};
export type OperationName = keyof typeof OPERATIONS;

export async function runOperation({ keys, owners, baseUrl }: OperationDeps, name: string, rawArgs: unknown): Promise<unknown> {
  if (!(name in OPERATIONS)) throw new OperationError(`Unknown operation ${name}.`);
  const parsed = OPERATIONS[name as OperationName].safeParse(rawArgs ?? {});
  if (!parsed.success) throw new OperationError(parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  const a = parsed.data as Record<string, never>;
  switch (name as OperationName) {
    case "apps.create":
      return keys.createApp(a.name, a.environment);
    case "apps.list":
      return keys.listApps();
    case "keys.create":
      return keys.createKeys(a.appId, a.environment);
    case "keys.list":
      return keys.listKeys(a.appId);
    case "keys.rotate":
      return keys.rotate(a.key, a.graceSeconds);
    case "keys.revoke":
      return keys.revoke(a.key);
    case "owners.signInLink": {
      const link = await owners.operatorSignInLink(a.email);
      return { url: signInLinkUrl(baseUrl, link.token), email: link.email, expiresAt: link.expiresAt, created: link.created };
    }
  }
}

export class OperationError extends Error {}
