import type { z } from "zod";
import type { ConnectInfo } from "@svc/contract";
import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { SessionPrincipal } from "../sessions/sessions.js";
import type { PublicUrls } from "../public-urls.js";
import { ApiError } from "../errors.js";
import { workerDownloads } from "./worker-downloads.js";

/** What the connect page shows: the app's name and the command that pairs a machine with it. */
export async function connectInfo(prisma: Prisma, clock: Clock, urls: PublicUrls, session: SessionPrincipal): Promise<z.infer<typeof ConnectInfo>> {
  const now = clock.now();
  const app = await prisma.app.findUniqueOrThrow({ where: { id: session.appId } });
  // The newest connect key still working; a rotated one in its grace period only when there is no other.
  const keys = await prisma.connectKey.findMany({
    where: { appId: session.appId, environment: session.environment, revokedAt: null, OR: [{ expiresAt: null }, { expiresAt: { gt: now } }] },
    orderBy: [{ createdAt: "desc" }],
  });
  const key = keys.find((k) => k.expiresAt === null) ?? keys[0];
  if (!key) throw new ApiError("service_unavailable", "This app has no working connect key: the app's owner must create one (npx svc keys create).");
  return {
    app: { id: app.id, name: app.name },
    environment: session.environment,
    user: session.user,
    connectKey: key.key,
    serverUrl: urls.base,
    pairingCommand: pairingCommand(key.key, urls.base),
    worker: workerDownloads(urls.base),
  };
}

/**
 * The command that pairs a machine: the worker package this service serves
 * (worker-downloads.ts), by its URL, so no registry name is involved that
 * anyone else could claim. `--yes`: npx installs it without asking (the
 * command is the user's consent); it works from any folder, an empty one too.
 */
export function pairingCommand(connectKey: string, serverUrl: string): string {
  return `npx --yes ${workerDownloads(serverUrl).packageUrl} pair --connect-key ${connectKey} --server ${serverUrl}`;
}
