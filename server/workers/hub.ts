import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import { credentialKindOf, serverMessage, WORKER_CLOSE, WORKER_CONNECT_PATH, WORKER_MAX_FRAME_BYTES, WORKER_MAX_JOB_FRAME_BYTES, type Job, type JobEvent, type JobSpanRecord } from "@svc/contract";
import { isDatabaseUnavailable } from "../db/outage.js";
import { databaseUnavailable } from "../http/errors.js";
import { answerOnSocket } from "../http/client-error.js";
import { ApiError } from "../errors.js";
import { randomId } from "../crypto.js";
import type { Logger } from "../logger.js";
import type { Notifications, Sql } from "../db/open.js";
import type { Clock } from "../clock.js";
import { InstanceBeat } from "../machines/liveness.js";
import { HEARTBEAT_TIMEOUT_SECONDS, MACHINE_REVOKED_CHANNEL, type MachineIdentity, type MachineService } from "../machines/machines.js";
import type { Tenant } from "../keys/keys.js";
import { heartbeatSecondsFor, WorkerConnection, type JobListener, type UpdateFor } from "./connection.js";
import type { ConnectionLimits } from "./limits.js";
import type { WebhookFacts } from "../webhooks/facts.js";
import type { Candidate } from "../runs/routing.js";

/** A job sent to a machine: its events arrive through `onEvent`; it can be cancelled or answered. */
export interface JobHandle {
  jobId: string;
  /** The worker keeps this job through a lost link and can resume it (`resume`). */
  resumable: boolean;
  /** Its events up to `n` are stored: the worker may drop them. */
  ack(n: number): void;
  cancel(reason?: string): void;
  answerPermission(requestId: string, allow: boolean, message?: string): void;
  /** The app's answer to an agent run's call of one of its tools, back to the CLI through the worker's tool bridge. */
  answerTool(callId: string, output: string, isError: boolean): void;
  /** The worker passes a user message to the running agent CLI (`steerable`: its worker takes `user_message`). */
  steerable: boolean;
  sendMessage(messageId: string, content: string): void;
}

/** An agent run resuming a CLI session on a machine whose worker keeps none (an older worker): never sent as a fresh run. */
export class SessionsUnsupported extends Error {
  constructor() {
    super("The worker on the user's machine is an older version that keeps no agent CLI sessions between runs, so the previous run's session is not there to continue; once the machine runs the current svc-worker, its runs keep them.");
  }
}

/** A job whose frame would pass the link's limit: it is never sent (the run fails `conversation_too_large`). */
export class JobTooLarge extends Error {
  constructor(
    readonly bytes: number,
    readonly limit: number,
    kind: Job["kind"],
  ) {
    super(`The ${kind === "model_turn" ? "model turn's" : "agent run's"} job is ${bytes} bytes, more than the ${limit} bytes the link to the machine takes in one frame: the conversation is too large.`);
  }
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = { messagesPerSecond: 200, bytesPerSecond: 8 * 1024 * 1024, jobFrameBytes: WORKER_MAX_JOB_FRAME_BYTES };

/**
 * The worker connections this instance holds. Workers connect outbound to
 * `/v1/worker` with their pairing token in the handshake's Authorization header
 * (never in the URL). A machine's live state lives in its row (which instance
 * holds it, its last heartbeat), so every instance reads the same truth; a
 * revocation made on any instance reaches the holder through a notification.
 */
export class WorkerHub {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: WORKER_MAX_FRAME_BYTES });
  /** The connection serving each machine (after its hello). */
  private readonly connections = new Map<string, WorkerConnection>();
  /** The machines served here of each user (`userKey`): routing here reads their runtimes. */
  private readonly byUser = new Map<string, Set<WorkerConnection>>();
  /** Every open connection, hello said or not: a revocation or a shutdown reaches them all. */
  private readonly all = new Set<WorkerConnection>();
  private stopListening: (() => Promise<void>) | null = null;

  /** Machines served by this instance now (their connection said hello): the metrics' machines online. */
  get machinesOnline(): number {
    return this.connections.size;
  }
  /** Writes started by connection events (a machine marked offline): shutdown waits for them before the database closes. */
  private readonly pending = new Set<Promise<unknown>>();
  private closing = false;

  constructor(
    private readonly machines: MachineService,
    private readonly notifications: Notifications,
    readonly instance: string,
    private readonly log: Logger,
    /** Told when a machine goes online or offline (webhooks). */
    private readonly facts: WebhookFacts | null = null,
    private readonly heartbeatTimeoutMs = HEARTBEAT_TIMEOUT_SECONDS * 1000,
    private readonly limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
    /** Where an older worker gets the current one, told in its `welcome` (none: nothing is told). */
    private readonly updateFor: UpdateFor = () => undefined,
    /** How long a lost machine's runs wait for it: a worker keeps its agent jobs that long. */
    private readonly jobGraceSeconds = 0,
    /** Of the jobs a reconnecting worker kept, those whose run goes on. */
    private readonly liveJobs?: (machineId: string, jobIds: string[]) => Promise<Set<string>>,
    /** This instance's beat, which keeps its machines online (liveness.ts), as often as its workers beat; none: a hub without a database of its own (never in the service). */
    liveness?: { sql: Sql; clock: Clock },
  ) {
    this.beat = liveness
      ? new InstanceBeat(liveness.sql, liveness.clock, instance, heartbeatSecondsFor(heartbeatTimeoutMs) * 1000, () => [...this.all].map((c) => c.identity.machineId), (ids) => this.removed(ids), log)
      : null;
  }

  private readonly beat: InstanceBeat | null;

  /** Machines removed (or gone) whose connections are still open here: closed. */
  private removed(machineIds: string[]): void {
    const ids = new Set(machineIds);
    for (const conn of this.all) if (ids.has(conn.identity.machineId)) conn.close(WORKER_CLOSE.revoked, "this machine was removed");
  }

  /** Takes the upgrade requests of `server` for the worker path. */
  async attach(server: Server): Promise<void> {
    // Alive before the first machine connects here: it reads online from its first write.
    await this.beat?.start();
    server.on("upgrade", (req, socket, head) => void this.upgrade(req, socket, head).catch((err) => (this.log.error({ err }, "worker upgrade failed"), socket.destroy())));
    this.stopListening = await this.notifications.listen(MACHINE_REVOKED_CHANNEL, (machineId) => this.removed([machineId]));
  }

  /** Is this machine's worker connected to this instance right now? */
  holds(machineId: string): boolean {
    return this.connections.get(machineId)?.open ?? false;
  }

  /**
   * The runtimes of this user's machines served here, as routing's candidates
   * (`pickRoute`), most recently connected first; none: no machine of theirs is here.
   */
  runtimesOf(owner: Tenant & { endUserId: string }): Candidate[] {
    const held = this.byUser.get(userKey(owner));
    if (!held) return [];
    return [...held]
      .filter((c) => c.open)
      .sort((a, b) => b.held.since - a.held.since)
      .flatMap((c) => c.candidates())
      .sort((a, b) => Number(a.busy) - Number(b.busy));
  }

  /**
   * Sends a job to a machine connected here, only if it belongs to this user of
   * this app and environment: a machine never receives another user's work.
   * `traced`: the job's span's trace context goes with it, and the machine's own
   * spans of the job (`job_spans`, when its user allows) come back to `onSpans`.
   */
  dispatch(
    owner: Tenant & { endUserId: string },
    machineId: string,
    job: Job,
    onEvent: (event: JobEvent, frameBytes: number) => void,
    queue: Pick<JobListener, "onQueued" | "onSent"> = {},
    traced?: { traceparent: string; onSpans(sentAt: number, spans: JobSpanRecord[]): void },
  ): JobHandle {
    const conn = this.ownConnection(owner, machineId);
    const jobId = randomId("job_", 20);
    if (job.kind === "agent_run" && job.session && !conn.keepsSessions) {
      // An older worker would ignore the session and start the CLI afresh: a lost context never goes unsaid.
      if (job.session.resume) throw new SessionsUnsupported();
      const { session: _kept, ...rest } = job;
      job = rest;
    }
    const make = () => JSON.stringify(serverMessage("job", { jobId, job, ...(traced ? { traceparent: traced.traceparent } : {}) }));
    const frame = make();
    // Never sent over the link's limit: the worker would drop the link and the run would come back to the same frame.
    const limit = Math.min(this.limits.jobFrameBytes, conn.maxJobFrameBytes);
    const bytes = Buffer.byteLength(frame);
    if (bytes > limit) {
      this.log.warn({ machineId, bytes, limit, kind: job.kind }, "job not sent: its frame is over the link's limit");
      throw new JobTooLarge(bytes, limit, job.kind);
    }
    conn.submit(jobId, job.runtime, frame, make, { onEvent, ...queue, ...(traced ? { onSpans: traced.onSpans } : {}) });
    return this.handle(conn, jobId);
  }

  /**
   * Takes back a job the machine's worker kept through a lost link, now that it is
   * connected here again: its events after `after` (those the run stored) come
   * again, then the rest. Only this user's machine, as for `dispatch`.
   */
  resume(owner: Tenant & { endUserId: string }, machineId: string, runtime: string, jobId: string, after: number, onEvent: JobListener["onEvent"]): JobHandle {
    const conn = this.ownConnection(owner, machineId);
    conn.resume(jobId, runtime, after, { onEvent });
    return this.handle(conn, jobId);
  }

  /** The machine's connection here, only if it belongs to this user of this app and environment. */
  private ownConnection(owner: Tenant & { endUserId: string }, machineId: string): WorkerConnection {
    const conn = this.connections.get(machineId);
    const id = conn?.identity;
    if (!conn?.open || !id || id.appId !== owner.appId || id.environment !== owner.environment || id.endUserId !== owner.endUserId) {
      throw new ApiError("no_compute", "That machine is not connected here for this user.");
    }
    return conn;
  }

  private handle(conn: WorkerConnection, jobId: string): JobHandle {
    return {
      jobId,
      resumable: conn.resumesJobs && this.jobGraceSeconds > 0,
      ack: (n) => conn.send(serverMessage("job_ack", { jobId, n })),
      cancel: (reason) => conn.cancel(jobId, reason),
      answerPermission: (requestId, allow, message) => conn.send(serverMessage("permission_response", { jobId, requestId, allow, ...(message ? { message } : {}) })),
      answerTool: (callId, output, isError) => conn.send(serverMessage("tool_result", { jobId, callId, output, isError })),
      steerable: conn.keepsSessions,
      sendMessage: (messageId, content) => conn.send(serverMessage("user_message", { jobId, messageId, content })),
    };
  }

  async close(): Promise<void> {
    // From here on `close` marks its machines offline itself; a socket closing meanwhile starts no write the database's close would cut.
    this.closing = true;
    await this.stopListening?.();
    await this.beat?.stop();
    for (const conn of this.all) conn.close(WORKER_CLOSE.goingAway, "the server is shutting down");
    await this.machines.stopHeartbeats();
    // Every machine held here offline in one statement (10,000 of them: not 10,000 writes before the process may exit).
    const held = [...this.connections.values()].map((c) => c.identity);
    const went = await this.machines.markAllDisconnected(
      held.map((id) => id.machineId),
      this.instance,
    ).catch((err) => (this.log.error({ err }, "could not mark this instance's machines offline"), new Map<string, Date>()));
    await Promise.all(held.map((id) => (went.has(id.machineId) ? this.facts?.machineOffline(id, went.get(id.machineId)!).catch(() => {}) : undefined)));
    await Promise.all(this.pending);
    this.wss.close();
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    // First: a client that resets while we answer must not crash the process.
    socket.on("error", () => {});
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (path !== WORKER_CONNECT_PATH) return this.refuse(socket, new ApiError("route_not_found", `No WebSocket route ${path}.`));
    // Shutting down: a worker reconnecting at once (its connection was just closed, 1001) is sent away, not taken on and left open.
    if (this.closing) return this.refuse(socket, new ApiError("service_unavailable", "The server is shutting down: connect again in a moment."));
    let identity;
    try {
      identity = await this.machines.verifyToken(bearerToken(req));
    } catch (err) {
      if (err instanceof ApiError) return this.refuse(socket, err);
      // The database unreachable for a moment: 503 with Retry-After (the worker reconnects with backoff), the outage itself logged once elsewhere.
      if (isDatabaseUnavailable(err)) return this.refuse(socket, databaseUnavailable());
      return this.refuse(socket, new ApiError("internal_error", "The service could not check the pairing token."), err);
    }
    if (this.closing) return this.refuse(socket, new ApiError("service_unavailable", "The server is shutting down: connect again in a moment."));
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, identity));
  }

  /**
   * Answers an upgrade request with a plain HTTP error in the envelope, then drops the socket.
   * The refusal is logged with the request id its envelope and `Request-Id` header carry
   * (a failure of the service's own, `cause`, with its error too).
   */
  private refuse(socket: Duplex, err: ApiError, cause?: unknown): void {
    const requestId = randomId("req_", 20);
    if (cause !== undefined) this.log.error({ err: cause, requestId }, "worker handshake failed");
    this.log.info({ requestId, status: err.status, code: err.code }, "worker connection refused");
    answerOnSocket(socket, err, requestId);
  }

  private accept(ws: WebSocket, identity: MachineIdentity): void {
    const { machineId } = identity;
    if (this.closing) return void ws.close(WORKER_CLOSE.goingAway, "the server is shutting down");
    const conn = new WorkerConnection(identity, ws, this.machines, this.instance, this.log, this.heartbeatTimeoutMs, (c) => this.online(c), this.limits, this.updateFor, this.jobGraceSeconds, this.liveJobs);
    this.all.add(conn);
    ws.on("error", (err: Error & { code?: string }) => {
      if (err.code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") {
        this.log.warn({ machineId, code: 1009 }, `worker connection closed: it sent a frame over ${WORKER_MAX_FRAME_BYTES} bytes`);
        conn.breachedBy(`a frame over the link's ${WORKER_MAX_FRAME_BYTES} bytes`);
      }
      else this.log.warn({ err, machineId }, "worker socket error");
    });
    ws.on("close", (code, reason) => {
      if (code >= 4000) this.log.info({ machineId, code, reason: reason.toString() }, "worker connection closed by policy");
      this.all.delete(conn);
      conn.closed();
      if (this.connections.get(machineId) !== conn) return;
      this.connections.delete(machineId);
      this.served(conn, false);
      this.log.info({ machineId, code }, "worker disconnected");
      if (this.closing) return;
      const write = this.offline(conn.identity).catch((err) => this.log.error({ err, machineId }, "could not mark a machine offline"));
      this.pending.add(write);
      void write.finally(() => this.pending.delete(write));
    });
  }

  /** Keeps `byUser` as `connections` is: a connection serving its machine here, or not any more. */
  private served(conn: WorkerConnection, serving: boolean): void {
    const key = userKey(conn.identity);
    const held = this.byUser.get(key);
    if (serving) return void (held ? held.add(conn) : this.byUser.set(key, new Set([conn])));
    held?.delete(conn);
    if (held?.size === 0) this.byUser.delete(key);
  }

  /** The machine's connection here ended: offline, unless another instance holds a newer one (then nothing is reported). */
  private async offline(id: MachineIdentity): Promise<void> {
    const connectedAt = await this.machines.markDisconnected(id.machineId, this.instance);
    if (connectedAt) await this.facts?.machineOffline(id, connectedAt);
  }

  /** After its hello the connection serves the machine; a machine has one, so a newer one replaces an older (a half-dead socket, a restart). */
  private async online(conn: WorkerConnection): Promise<boolean> {
    const { machineId } = conn.identity;
    // Removed since its handshake: it is not welcomed.
    const connected = await this.machines.markConnected(machineId, this.instance);
    if (!connected) return false;
    // A connection that ended unseen (its instance died) went offline first; a live one replaced here is no change.
    if (!connected.wasOnline && connected.previousConnectedAt) await this.facts?.machineOffline(conn.identity, connected.previousConnectedAt);
    if (!connected.wasOnline) void this.facts?.machineOnline(conn.identity, connected.connectedAt);
    const older = this.connections.get(machineId);
    this.connections.set(machineId, conn);
    if (older && older !== conn) this.served(older, false);
    this.served(conn, true);
    if (older && older !== conn) {
      older.close(WORKER_CLOSE.replaced, "a newer connection of this machine took over");
      // Its jobs died with the worker's old link: their runs are taken over now, not once the old socket finishes closing.
      older.closed();
    }
    this.log.info({ machineId }, "worker online");
    return true;
  }
}

function userKey(owner: Tenant & { endUserId: string }): string {
  return `${owner.appId}\n${owner.environment}\n${owner.endUserId}`;
}

/** The pairing token from `Authorization: Bearer pt_svc_...`; any other credential is refused. */
function bearerToken(req: IncomingMessage): string {
  const header = req.headers.authorization;
  if (!header) throw new ApiError("missing_credential", "The worker connection takes the pairing token: Authorization: Bearer pt_svc_<token>.");
  const m = /^Bearer +(\S+)\s*$/i.exec(header);
  if (!m) throw new ApiError("invalid_credential", 'The Authorization header must be "Bearer <pairing token>".');
  const kind = credentialKindOf(m[1]);
  if (kind !== "pairingToken") throw new ApiError(kind === null ? "invalid_credential" : "wrong_credential_kind", "The worker connection takes the pairing token (pt_svc_...).");
  return m[1];
}
