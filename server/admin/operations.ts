import { z } from "zod";
import { Environment } from "@svc/contract";
import { DEFAULT_ROTATION_GRACE_SECONDS, type KeyService } from "../keys/keys.js";

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
};
export type OperationName = keyof typeof OPERATIONS;

export async function runOperation(keys: KeyService, name: string, rawArgs: unknown): Promise<unknown> {
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
  }
}

export class OperationError extends Error {}
