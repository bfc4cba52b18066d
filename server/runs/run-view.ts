import type { z } from "zod";
import type { Run as RunView, RunRoute, RunSource } from "@svc/contract";
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
    source: r.source as RunSource,
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
    budget: budgetView(r.budget ?? (r.request as { budget?: unknown } | null)?.budget ?? null),
    pausedAt: r.status === "paused" && r.pausedAt ? r.pausedAt.toISOString() : null,
    previousRunId: r.previousRunId,
    lastEventId: r.lastSeq,
    createdAt: r.createdAt.toISOString(),
    finishedAt: r.finishedAt?.toISOString() ?? null,
  };
}

/** A run's budget as stored (`request.budget`, or `runs.budget` once raised), as the run view says it. */
export function budgetView(b: unknown): { maxMicros: string | null; maxTokens: number | null } | null {
  if (!b || typeof b !== "object") return null;
  const { maxMicros, maxTokens } = b as { maxMicros?: string; maxTokens?: number };
  return { maxMicros: maxMicros ?? null, maxTokens: maxTokens ?? null };
}
