import type { WebSocket } from "ws";
import { parseFrame, serverMessage, workerMessage, WORKER_CLOSE, WORKER_FEATURES, WORKER_MAX_FRAME_BYTES, WorkerMessage, type JobEvent, type JobSpanRecord, type RuntimeAdvert, type ServerMessage } from "@svc/contract";
import type { Logger } from "../logger.js";
import { jobFailed } from "../errors.js";
import type { MachineIdentity, MachineService } from "../machines/machines.js";
import { KIND_LIMITS, TokenBucket, type ConnectionLimits } from "./limits.js";
import { HeldRuntimes } from "./held-runtimes.js";
import type { Candidate } from "../runs/routing.js";

/** Seconds between the worker's heartbeats, told in `welcome`. */
export const HEARTBEAT_SECONDS = 10;
/** The heartbeat interval told to workers: a quarter of the timeout, `HEARTBEAT_SECONDS` at most, 1 s at least. */
/** The `update` a `welcome` carries for a worker's hello (its client and version), or none. */
export type UpdateFor = (client: string, version: string) => Extract<ServerMessage, { type: "welcome" }>["payload"]["update"];

export const heartbeatSecondsFor = (timeoutMs: number) => Math.max(1, Math.min(HEARTBEAT_SECONDS, Math.floor(timeoutMs / 4000)));

/** The frame an idle worker sends every heartbeat, and what it parses to. */
const IDLE_HEARTBEAT_MESSAGE = workerMessage("heartbeat", { busy: Object.freeze([]) as unknown as string[] });
const IDLE_HEARTBEAT_FRAME = JSON.stringify(IDLE_HEARTBEAT_MESSAGE);
const IDLE_HEARTBEAT = { ok: true as const, message: IDLE_HEARTBEAT_MESSAGE as WorkerMessage };
/** Bad frames a connection may send before it is closed. */
const MAX_BAD_FRAMES = 10;
/** A cancelled job keeps its slot until the worker says it stopped, or this long. */
const CANCELLED_SLOT_MS = 30_000;
/** Jobs ended here whose late events are dropped quietly (a cancel racing the worker's events). */
const RECENTLY_ENDED = 256;

export interface JobListener {
  /** An event of the job, with the size of the frame that carried it, and its number in the job (a worker that resumes jobs numbers them). */
  onEvent(event: JobEvent, frameBytes: number, n?: number): void;
  /** The job waits here for a slot (its runtime at its cap): its place among the jobs waiting for that runtime (1: next), and the cap. */
  onQueued?(place: number, cap: number): void;
  /** A job that waited for a slot has been sent. */
  onSent?(): void;
  /** The machine's own spans of the job (`job_spans`), for a job sent with a `traceparent`. */
  onSpans?(sentAt: number, spans: JobSpanRecord[]): void;
}

interface SentJob {
  listener: JobListener;
  runtime: string;
  cancelled: boolean;
  timer: NodeJS.Timeout | null;
  /** Its `job_spans` came (taken once per job). */
  spans?: boolean;
}

interface QueuedJob {
  jobId: string;
  runtime: string;
  /** Makes its frame again when it goes out (a waiting job does not hold its frame). */
  frame: () => string;
  listener: JobListener;
  /** Its place among the jobs waiting for its runtime, as last told (1: next). */
  place: number;
}

/**
 * One worker's WebSocket: the catalog checked on every frame, its hello,
 * heartbeats and runtimes kept in the database, and job events handed to whoever
 * dispatched the job. Nothing it sends can crash the server: a bad frame gets an
 * `error` message, too many of them close the connection (4004), and so does
 * sending too much (4029): more messages or bytes per second than its buckets
 * hold, or heartbeats, runtimes lists and error reports faster than a worker
 * ever needs to. Jobs are sent no faster than each runtime's advertised
 * `maxConcurrentJobs`: more wait here for a free slot.
 */
export class WorkerConnection {
  private said = false;
  private badFrames = 0;
  /** Which of its connection's limits the machine broke, when that is why it was closed: its jobs then end at once with it, instead of waiting out the grace. */
  private breach: string | null = null;
  private closing = false;
  private idleTimer: NodeJS.Timeout | null = null;
  /** Jobs sent to the worker and not ended. */
  readonly jobs = new Map<string, SentJob>();
  private readonly queued: QueuedJob[] = [];
  private readonly ended = new Set<string>();
  /** Its runtimes, their caps, busy and windows: what routing here reads (RunService.begin). */
  readonly held = new HeldRuntimes();
  /** The largest frame the worker said it reads (older workers: the 1 MiB they accept). */
  maxJobFrameBytes = WORKER_MAX_FRAME_BYTES;
  /** The worker keeps an agent job through a lost link and resumes it (its hello's `job_resume`). */
  resumesJobs = false;
  /** The worker keeps agent CLI sessions between runs (`agent_run.session`) and takes `user_message` (`sessions`). */
  keepsSessions = false;
  private readonly messages: TokenBucket;
  private readonly bytes: TokenBucket;
  private readonly kinds: Record<keyof typeof KIND_LIMITS, TokenBucket>;

  constructor(
    readonly identity: MachineIdentity,
    private readonly socket: WebSocket,
    private readonly machines: MachineService,
    private readonly instance: string,
    private readonly log: Logger,
    private readonly heartbeatTimeoutMs: number,
    /** Called on hello: only then is the machine online through this connection; false when it was removed meanwhile. */
    private readonly onHello: (conn: WorkerConnection) => Promise<boolean>,
    limits: ConnectionLimits,
    private readonly updateFor: UpdateFor = () => undefined,
    /** How long a lost machine's runs wait for it (told in `welcome`: a worker keeps its agent jobs that long). */
    private readonly jobGraceSeconds = 0,
    /** Of the jobs a reconnecting worker kept, those whose run goes on (the others are cancelled). */
    private readonly liveJobs: (machineId: string, jobIds: string[]) => Promise<Set<string>> = async () => new Set(),
  ) {
    // For the connection itself and again for each job it runs: a machine streaming many jobs at once is not a flood.
    const scale = () => 1 + this.jobs.size;
    this.messages = new TokenBucket(limits.messagesPerSecond * 5, limits.messagesPerSecond, scale);
    this.bytes = new TokenBucket(limits.bytesPerSecond * 4, limits.bytesPerSecond, scale);
    // Heartbeats as often as this connection was told to send them, three times over: a short heartbeat timeout (1 s beats) is no flood.
    const beats = Math.max(KIND_LIMITS.heartbeat.perSecond, 3 / heartbeatSecondsFor(heartbeatTimeoutMs));
    this.kinds = {
      heartbeat: new TokenBucket(KIND_LIMITS.heartbeat.capacity, beats),
      runtimes: new TokenBucket(KIND_LIMITS.runtimes.capacity, KIND_LIMITS.runtimes.perSecond),
      error: new TokenBucket(KIND_LIMITS.error.capacity, KIND_LIMITS.error.perSecond),
      runtime_limits: new TokenBucket(KIND_LIMITS.runtime_limits.capacity, KIND_LIMITS.runtime_limits.perSecond),
      jobs_held: new TokenBucket(KIND_LIMITS.jobs_held.capacity, KIND_LIMITS.jobs_held.perSecond),
    };
    socket.on("message", (data: Buffer, isBinary) => void this.receive(isBinary ? null : data.toString("utf8"), data.length));
    this.armIdleTimer();
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  send(message: ServerMessage): void {
    if (this.open) this.socket.send(JSON.stringify(message));
  }

  close(code: number, reason: string): void {
    this.closing = true;
    this.socket.close(code, reason);
  }

  /** Sends a job (its frame already made, and how to make it again), or queues it while its runtime is at its cap. */
  submit(jobId: string, runtime: string, frame: string | null, make: () => string, listener: JobListener): void {
    const cap = this.held.caps.get(runtime) ?? Infinity;
    if (this.running(runtime) >= cap) {
      // First in, first out per runtime: `pump` takes the oldest waiting job of a runtime whose slot freed.
      const place = this.queued.filter((q) => q.runtime === runtime).length + 1;
      this.queued.push({ jobId, runtime, frame: make, listener, place });
      listener.onQueued?.(place, cap);
      return;
    }
    this.sendJob(jobId, runtime, frame ?? make(), listener);
  }

  /**
   * Takes back a job the worker kept through a lost link (`resume_job`): its events
   * after `after` (those stored) come again, then the rest, to `listener`.
   */
  resume(jobId: string, runtime: string, after: number, listener: JobListener): void {
    this.jobs.set(jobId, { listener, runtime, cancelled: false, timer: null });
    this.send(serverMessage("resume_job", { jobId, after }));
  }

  private sendJob(jobId: string, runtime: string, frame: string, listener: JobListener): void {
    this.jobs.set(jobId, { listener, runtime, cancelled: false, timer: null });
    if (this.open) this.socket.send(frame);
  }

  /** Stops a job: a queued one is dropped; a sent one is told to stop and keeps its slot until the worker says it ended (at most 30 s; its events still reach its listener). */
  cancel(jobId: string, reason?: string): void {
    const q = this.queued.findIndex((j) => j.jobId === jobId);
    if (q >= 0) {
      this.queued.splice(q, 1);
      return;
    }
    const job = this.jobs.get(jobId);
    if (!job || job.cancelled) return;
    job.cancelled = true;
    this.send(serverMessage("cancel", { jobId, ...(reason ? { reason } : {}) }));
    job.timer = setTimeout(() => this.endJob(jobId), CANCELLED_SLOT_MS);
    job.timer.unref();
  }

  /** Closed for breaking one of its limits: the jobs it held end now (`machine_limit_exceeded`), saying which limit. */
  breachedBy(what: string): void {
    this.breach ??= what;
  }

  /**
   * Whatever the reason, the connection is gone: every job still running or waiting
   * hears so. A link that dropped is `worker_lost` (its runs wait the grace for the
   * machine); a machine closed for breaking a limit misbehaved, it did not drop off:
   * its jobs end at once with the limit's own code.
   */
  closed(): void {
    this.closing = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    const waiting = [...this.jobs].filter(([, j]) => !j.cancelled).map(([id, j]) => [id, j.listener] as const);
    for (const q of this.queued.splice(0)) waiting.push([q.jobId, q.listener]);
    for (const job of this.jobs.values()) if (job.timer) clearTimeout(job.timer);
    this.jobs.clear();
    const breach = this.breach;
    for (const [jobId, listener] of waiting) {
      listener.onEvent(
        breach
          ? jobFailed("machine_limit_exceeded", `The service closed the link to the user's machine while job ${jobId} ran: it sent ${breach}; the run was stopped.`)
          : jobFailed("worker_lost", `The machine's connection closed while job ${jobId} ran.`),
        0,
      );
    }
  }

  private running(runtime: string): number {
    let n = 0;
    for (const j of this.jobs.values()) if (j.runtime === runtime) n++;
    return n;
  }

  /** A job's slot is free: the next job waiting for its runtime goes out. */
  private endJob(jobId: string): void {
    const job = this.jobs.get(jobId);
    if (!job) return;
    if (job.timer) clearTimeout(job.timer);
    this.jobs.delete(jobId);
    this.ended.add(jobId);
    if (this.ended.size > RECENTLY_ENDED) this.ended.delete(this.ended.values().next().value!);
    this.pump();
  }

  private pump(): void {
    let moved = false;
    for (let i = 0; i < this.queued.length; ) {
      const q = this.queued[i];
      if (this.running(q.runtime) < (this.held.caps.get(q.runtime) ?? Infinity)) {
        this.queued.splice(i, 1);
        this.sendJob(q.jobId, q.runtime, q.frame(), q.listener);
        q.listener.onSent?.();
        moved = true;
      } else i++;
    }
    if (moved) this.tellPlaces();
  }

  /** The jobs still waiting moved up: each is told its new place (once per change). */
  private tellPlaces(): void {
    const seen = new Map<string, number>();
    for (const q of this.queued) {
      const place = (seen.get(q.runtime) ?? 0) + 1;
      seen.set(q.runtime, place);
      if (place === q.place) continue;
      q.place = place;
      q.listener.onQueued?.(place, this.held.caps.get(q.runtime) ?? 0);
    }
  }

  private armIdleTimer(): void {
    // Every message re-arms it: the same timer restarted (10,000 idle machines beat 1,000 times a second).
    if (this.idleTimer) return void this.idleTimer.refresh();
    this.idleTimer = setTimeout(() => this.silent(), this.heartbeatTimeoutMs);
    this.idleTimer.unref();
  }

  /**
   * Nothing heard for the heartbeat timeout: the link is taken for gone at once.
   * A close frame (4003) is sent for a worker that can still hear, then the socket
   * is dropped: a silent peer never finishes the closing handshake, and until the
   * close the machine would stay held here and its jobs would wait.
   */
  private silent(): void {
    this.close(WORKER_CLOSE.heartbeatTimeout, "no heartbeat in time");
    this.socket.terminate();
  }

  private refuse(reason: string): void {
    this.send(serverMessage("error", { code: "bad_message", message: reason }));
    if (++this.badFrames >= MAX_BAD_FRAMES) {
      this.breachedBy(`${MAX_BAD_FRAMES} messages the protocol does not allow`);
      this.close(WORKER_CLOSE.protocolError, "too many bad messages");
    }
  }

  /** Too much sent: closed with 4029, logged once. */
  private flooded(what: string): void {
    if (this.closing) return;
    this.log.warn({ machineId: this.identity.machineId, what }, "worker connection closed: it sent too much");
    this.breachedBy(`too many ${what}`);
    this.close(WORKER_CLOSE.tooManyMessages, `too many ${what}`.slice(0, 120));
  }

  private async receive(text: string | null, size: number): Promise<void> {
    if (this.closing) return;
    if (!this.messages.take()) return this.flooded(`messages (more than ${this.messages.perSecond} per second, and as many per job running)`);
    if (!this.bytes.take(size)) return this.flooded(`bytes (more than ${this.bytes.perSecond} per second, and as many per job running)`);
    try {
      if (text === null) return this.refuse("binary frames are not part of the protocol; send JSON text");
      // An idle machine's heartbeat, byte for byte as svc-worker sends it (most frames of an idle fleet): the same message, without parsing it again.
      const parsed = text === IDLE_HEARTBEAT_FRAME ? IDLE_HEARTBEAT : parseFrame(WorkerMessage, text);
      if (!parsed.ok) return this.refuse(parsed.reason);
      const type = parsed.message.type;
      if (type === "heartbeat" || type === "runtimes" || type === "error" || type === "runtime_limits" || type === "jobs_held") {
        if (!this.kinds[type].take()) return this.flooded(KIND_LIMITS[type].what);
      }
      this.armIdleTimer();
      await this.handle(parsed.message, size);
    } catch (err) {
      this.log.error({ err, machineId: this.identity.machineId }, "worker message failed");
      this.send(serverMessage("error", { code: "internal_error", message: "The service could not handle that message." }));
    }
  }

  /** A runtimes list: kept here (with the windows the rows hold) once stored, and the jobs waiting for a slot get the new caps. */
  private async advertise(runtimes: RuntimeAdvert[]): Promise<void> {
    this.held.advertised(runtimes);
    this.pump();
    this.held.stored(await this.machines.setRuntimes(this.identity, runtimes));
  }

  /** Its runtimes as routing's candidates: a capped runtime's jobs sent or waiting here are its active runs. */
  candidates(): Candidate[] {
    return this.held.candidates(this.identity.machineId, this.instance, (runtime) => this.running(runtime) + this.queued.filter((q) => q.runtime === runtime).length);
  }

  private async handle(message: WorkerMessage, size: number): Promise<void> {
    if (message.type !== "hello" && message.type !== "unpair" && !this.said) return this.refuse(`say hello first (got ${message.type})`);
    switch (message.type) {
      case "hello":
        if (this.said) return this.refuse("hello was already said on this connection");
        this.said = true;
        this.maxJobFrameBytes = message.payload.maxJobFrameBytes ?? WORKER_MAX_FRAME_BYTES;
        this.resumesJobs = message.payload.features?.includes(WORKER_FEATURES.jobResume) ?? false;
        this.keepsSessions = message.payload.features?.includes(WORKER_FEATURES.sessions) ?? false;
        // Runtimes first, so the machine is never online with another machine's or an old list.
        await this.advertise(message.payload.runtimes);
        if (!(await this.onHello(this))) return this.close(WORKER_CLOSE.revoked, "this machine was removed");
        const update = this.updateFor(message.payload.client, message.payload.version);
        this.send(
          serverMessage("welcome", { machineId: this.identity.machineId, heartbeatSeconds: heartbeatSecondsFor(this.heartbeatTimeoutMs), appName: this.identity.appName, features: [WORKER_FEATURES.jobUsage, WORKER_FEATURES.jobSpans, WORKER_FEATURES.runtimeLimits, WORKER_FEATURES.jobResume],
            jobGraceSeconds: this.jobGraceSeconds,
            ...(update ? { update } : {}),
          }),
        );
        this.log.info({ machineId: this.identity.machineId, runtimes: message.payload.runtimes.map((r) => r.name) }, "worker hello");
        return;
      case "runtimes":
        return this.advertise(message.payload.runtimes);
      case "heartbeat":
        this.held.beat(message.payload.busy);
        // Kept in memory: written only when its busy runtimes changed (liveness lives with this connection).
        return this.machines.heartbeat(this.identity.machineId, this.instance, message.payload.busy);
      case "jobs_held": {
        // The jobs a reconnecting worker kept: those whose run goes on are resumed by whichever driver takes the run; the others stop now.
        const ids = message.payload.jobs.map((j) => j.jobId);
        const live = await this.liveJobs(this.identity.machineId, ids);
        for (const jobId of ids) if (!live.has(jobId) && !this.jobs.has(jobId)) this.send(serverMessage("cancel", { jobId, reason: "the run this job served ended while the machine was away" }));
        return;
      }
      case "job_event": {
        const { jobId, event, n } = message.payload;
        const job = this.jobs.get(jobId);
        if (!job) {
          // A late event of a job that ended here (a cancel racing the worker) is dropped quietly.
          if (this.ended.has(jobId)) return;
          return this.refuse(`no job ${jobId} is running on this machine`);
        }
        const terminal = event.type === "done" || event.type === "failed";
        if (terminal) this.endJob(jobId);
        job.listener.onEvent(event, size, n);
        return;
      }
      case "runtime_limits": {
        const { runtime, windows, updatedAt } = message.payload;
        this.held.limits(runtime, { windows, updatedAt });
        return this.machines.setLimits(this.identity, runtime, { windows, updatedAt });
      }
      case "job_spans": {
        // Only for a job of this machine's, still running here, once: a machine cannot put spans into another job's trace.
        const { jobId, sentAt, spans } = message.payload;
        const job = this.jobs.get(jobId);
        if (!job) return this.ended.has(jobId) ? undefined : this.refuse(`no job ${jobId} is running on this machine`);
        if (job.spans) return this.refuse(`the spans of job ${jobId} were already sent`);
        job.spans = true;
        job.listener.onSpans?.(sentAt, spans);
        return;
      }
      case "unpair":
        // The machine's own token asks: it removes exactly this machine, of its own user.
        await this.machines.revoke(this.identity, this.identity.endUserId, this.identity.machineId);
        this.close(WORKER_CLOSE.revoked, "unpaired");
        return;
      case "error":
        this.log.warn({ machineId: this.identity.machineId, code: message.payload.code, jobId: message.payload.jobId }, "worker reported an error");
        return;
    }
  }
}
