import type { z } from "zod";
import type { ConnectInfo } from "@svc/contract";
import type { Prisma } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { SessionPrincipal } from "../sessions/sessions.js";
import type { PublicUrls } from "../public-urls.js";
import { ApiError } from "../errors.js";

/** The package end users run on their machine (`worker/`). */
export const WORKER_PACKAGE = "svc-worker";

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
  };
}

export function pairingCommand(connectKey: string, serverUrl: string): string {
  return `npx ${WORKER_PACKAGE} pair --connect-key ${connectKey} --server ${serverUrl}`;
}
