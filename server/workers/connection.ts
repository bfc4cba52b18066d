import type { WebSocket } from "ws";
import { parseFrame, serverMessage, WORKER_CLOSE, WorkerMessage, type JobEvent, type ServerMessage } from "@svc/contract";
import type { Logger } from "../logger.js";
import type { MachineIdentity, MachineService } from "../machines/machines.js";

/** Seconds between the worker's heartbeats, told in `welcome`. */
export const HEARTBEAT_SECONDS = 10;
/** The heartbeat interval told to workers: a quarter of the timeout, `HEARTBEAT_SECONDS` at most, 1 s at least. */
export const heartbeatSecondsFor = (timeoutMs: number) => Math.max(1, Math.min(HEARTBEAT_SECONDS, Math.floor(timeoutMs / 4000)));
/** Bad frames a connection may send before it is closed. */
const MAX_BAD_FRAMES = 10;

export interface JobListener {
  onEvent(event: JobEvent): void;
}

/**
 * One worker's WebSocket: the catalog checked on every frame, its hello,
 * heartbeats and runtimes kept in the database, and job events handed to whoever
 * dispatched the job. Nothing it sends can crash the server: a bad frame gets an
 * `error` message, too many of them close the connection.
 */
export class WorkerConnection {
  private said = false;
  private badFrames = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  readonly jobs = new Map<string, JobListener>();

  constructor(
    readonly identity: MachineIdentity,
    private readonly socket: WebSocket,
    private readonly machines: MachineService,
    private readonly instance: string,
    private readonly log: Logger,
    private readonly heartbeatTimeoutMs: number,
    /** Called on hello: only then is the machine online through this connection; false when it was removed meanwhile. */
    private readonly onHello: (conn: WorkerConnection) => Promise<boolean>,
  ) {
    socket.on("message", (data, isBinary) => void this.receive(isBinary ? null : data.toString("utf8")));
    this.armIdleTimer();
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  send(message: ServerMessage): void {
    if (this.open) this.socket.send(JSON.stringify(message));
  }

  close(code: number, reason: string): void {
    this.socket.close(code, reason);
  }

  /** Whatever the reason, the connection is gone: every job still running hears so. */
  closed(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    for (const [jobId, listener] of this.jobs) {
      listener.onEvent({ type: "failed", code: "worker_lost", message: `The machine's connection closed while job ${jobId} ran.` });
    }
    this.jobs.clear();
  }

  private armIdleTimer(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
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
    if (++this.badFrames >= MAX_BAD_FRAMES) this.close(WORKER_CLOSE.protocolError, "too many bad messages");
  }

  private async receive(text: string | null): Promise<void> {
    try {
      if (text === null) return this.refuse("binary frames are not part of the protocol; send JSON text");
      const parsed = parseFrame(WorkerMessage, text);
      if (!parsed.ok) return this.refuse(parsed.reason);
      this.armIdleTimer();
      await this.handle(parsed.message);
    } catch (err) {
      this.log.error({ err, machineId: this.identity.machineId }, "worker message failed");
      this.send(serverMessage("error", { code: "internal_error", message: "The service could not handle that message." }));
    }
  }

  private async handle(message: WorkerMessage): Promise<void> {
    if (message.type !== "hello" && message.type !== "unpair" && !this.said) return this.refuse(`say hello first (got ${message.type})`);
    switch (message.type) {
      case "hello":
        if (this.said) return this.refuse("hello was already said on this connection");
        this.said = true;
        // Runtimes first, so the machine is never online with another machine's or an old list.
        await this.machines.setRuntimes(this.identity, message.payload.runtimes);
        if (!(await this.onHello(this))) return this.close(WORKER_CLOSE.revoked, "this machine was removed");
        this.send(serverMessage("welcome", { machineId: this.identity.machineId, heartbeatSeconds: heartbeatSecondsFor(this.heartbeatTimeoutMs), appName: this.identity.appName }));
        this.log.info({ machineId: this.identity.machineId, runtimes: message.payload.runtimes.map((r) => r.name) }, "worker hello");
        return;
      case "runtimes":
        return this.machines.setRuntimes(this.identity, message.payload.runtimes);
      case "heartbeat": {
        const { revoked } = await this.machines.heartbeat(this.identity.machineId, this.instance, message.payload.busy);
        if (revoked) this.close(WORKER_CLOSE.revoked, "this machine was removed");
        return;
      }
      case "job_event": {
        const listener = this.jobs.get(message.payload.jobId);
        if (!listener) return this.refuse(`no job ${message.payload.jobId} is running on this machine`);
        const { event } = message.payload;
        if (event.type === "done" || event.type === "failed") this.jobs.delete(message.payload.jobId);
        listener.onEvent(event);
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
