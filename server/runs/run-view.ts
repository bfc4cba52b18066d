import type { z } from "zod";
import type { Run as RunView, RunRoute } from "@svc/contract";
import type { Database } from "../db/open.js";
import { costClassOf, type CostRoute } from "../ledger/metering.js";

/** A run as Prisma reads it. */
export type RunRecord = NonNullable<Awaited<ReturnType<Database["prisma"]["run"]["findFirst"]>>>;

/** A run as the app (and the app's owner) reads it. */
export function runView(r: RunRecord & { endUser: { externalId: string } }): z.infer<typeof RunView> {
  const error = r.error as { code: string; message: string } | null;
  return {
    id: r.id,
    user: r.endUser.externalId,
    source: r.source as "runs" | "chat" | "responses",
    status: r.status,
    model: r.model,
    route: r.routeKind as RunRoute | null,
    costClass: r.routeKind ? costClassOf(r.routeKind as CostRoute) : null,
    machineId: r.machineId,
    runtime: r.runtimeName,
    turns: r.turns,
    output: r.output,
    stopReason: r.stopReason,
    error,
    usage: { inputTokens: Number(r.inputTokens), outputTokens: Number(r.outputTokens) },
    lastEventId: r.lastSeq,
    createdAt: r.createdAt.toISOString(),
    finishedAt: r.finishedAt?.toISOString() ?? null,
  };
}
