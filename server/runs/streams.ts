import type { Readable } from "node:stream";
import type { Response } from "express";
import type { CreateRunRequest } from "@svc/contract";
import type { Logger } from "../logger.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import type { RunBus } from "./bus.js";
import type { RunService } from "./runs.js";
import type { RunStore } from "./store.js";
import type { StreamSlots } from "./stream-slots.js";
import { runEventStream } from "./sse.js";

/** Where a re-attaching reader resumes: `Last-Event-ID` (a header) wins over `?after=`. */
export interface StreamFrom {
  lastEventId?: string;
  after?: number;
}

/**
 * A run's `text/event-stream`, opened on the response: when a run starts, and
 * when a reader re-attaches. Each stream holds one of the app's stream slots,
 * taken before anything else is done (refused: nothing started); the run's id
 * goes out with the headers, before the first event.
 */
export class RunStreams {
  constructor(
    private readonly runs: RunService,
    private readonly store: RunStore,
    private readonly bus: RunBus,
    private readonly slots: StreamSlots,
    private readonly log: Logger,
  ) {}

  /** `POST /v1/runs`: starts the run, then streams its events from the first. */
  async start(tenant: Tenant, body: CreateRunRequest, res: Response, replayRunId?: string): Promise<Readable> {
    this.slots.take(tenant, res);
    const { runId, drivenHere } = await this.runs.start(tenant, body, replayRunId);
    res.setHeader("Service-Run-Id", runId);
    // A run driven here has stored nothing yet: its first events come through the bus.
    return runEventStream(this.store, this.bus, this.log, runId, 0, res, !drivenHere);
  }

  /** `GET /v1/runs/:id/events`: the run's events after the reader's last one; a run handed back has none (409 `run_finished`). */
  async reattach(tenant: Tenant, runId: string, from: StreamFrom, res: Response): Promise<Readable> {
    const run = await this.runs.find(tenant, runId);
    this.slots.take(tenant, res);
    if (run.status === "handed_back") throw new ApiError("run_finished", `Run ${run.id} was handed back to the app (serve_in_app): the service streamed nothing for it.`);
    // Its events are on the run bus and NATS is known to be away: 503 now (the stream's headers would go out before its first read).
    if (run.eventsInStream) this.store.stream?.reachable(`could not re-attach to run ${run.id}'s events`);
    const after = from.lastEventId !== undefined ? Number(from.lastEventId) : (from.after ?? 0);
    res.setHeader("Service-Run-Id", run.id);
    return runEventStream(this.store, this.bus, this.log, run.id, after, res);
  }
}
