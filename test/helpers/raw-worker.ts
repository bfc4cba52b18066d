import WebSocket from "ws";
import { WORKER_CONNECT_PATH, workerMessage, type Job, type JobEvent, type RuntimeAdvert, type ServerMessage } from "@svc/contract";
import { pollUntil } from "./process.js";

/**
 * The one raw worker-protocol client of the test suite: a paired machine's
 * connection with no svc-worker in between, a test double speaking the real
 * protocol over a real WebSocket with a real pairing token. Two ways to use it:
 *
 * - `connectRawWorker`: every frame by hand (`send`, `sendPaced` for floods,
 *   `next` to wait for what the service says), for protocol and hostile-machine
 *   tests; a double may misbehave in any way a frame can.
 * - `connectWorkerDouble`: on top of it, a well-behaved machine (hello with its
 *   runtimes, heartbeats at the interval the service asks for, each job answered
 *   with the events `answer` returns), lighter than a `svc-worker` process when a
 *   suite needs many machines online.
 */
export interface RawWorker {
  ws: WebSocket;
  /** Messages received and not yet taken by `next` (nor by a `take` handler). */
  pending: ServerMessage[];
  /** Every message the service sent, in order (a log: `next` takes nothing from it). */
  received: ServerMessage[];
  /** The next message of this type not taken yet (waits for it). */
  next<T extends ServerMessage["type"]>(type: T, timeoutMs?: number): Promise<Extract<ServerMessage, { type: T }>>;
  /** From now on, every message of this type goes to `handler` (still logged in `received`), never to `pending` or `next`. */
  take<T extends ServerMessage["type"]>(type: T, handler: (message: Extract<ServerMessage, { type: T }>) => void): void;
  /** Sends a frame (an object as JSON, a string as it is) if the socket is open. */
  send(message: unknown): void;
  /** Sends and resolves once the socket's buffer took it (for floods: never more than `highWater` bytes queued). */
  sendPaced(message: unknown, highWater?: number): Promise<void>;
  /** Resolves when the socket closes, with the code and reason. */
  closed: Promise<{ code: number; reason: string }>;
  /** Closes the connection (1000) and resolves once closed (terminated after 2 s). */
  close(): Promise<void>;
}

/** Opens a worker connection with the token in the Authorization header; resolves once open. Pushed onto `open` for `closeRawWorkers`. */
export async function connectRawWorker(baseUrl: string, token: string, open: WebSocket[] = []): Promise<RawWorker> {
  const ws = new WebSocket(`${baseUrl.replace(/^http/, "ws")}${WORKER_CONNECT_PATH}`, { headers: { authorization: `Bearer ${token}` }, maxPayload: 64 * 1024 * 1024 });
  open.push(ws);
  const pending: ServerMessage[] = [];
  const received: ServerMessage[] = [];
  const waiters: { type: string; resolve: (m: ServerMessage) => void }[] = [];
  const handlers = new Map<string, (m: ServerMessage) => void>();
  ws.on("message", (data) => {
    const message = JSON.parse(data.toString("utf8")) as ServerMessage;
    received.push(message);
    const handler = handlers.get(message.type);
    if (handler) return handler(message);
    const i = waiters.findIndex((w) => w.type === message.type);
    if (i >= 0) waiters.splice(i, 1)[0].resolve(message);
    else pending.push(message);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`the handshake answered ${res.statusCode}`)));
  });
  ws.on("error", () => {});
  const frame = (message: unknown) => (typeof message === "string" ? message : JSON.stringify(message));
  return {
    ws,
    pending,
    received,
    closed,
    send: (message) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(frame(message));
    },
    sendPaced: async (message, highWater = 4 * 1024 * 1024) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(frame(message));
      while (ws.readyState === WebSocket.OPEN && ws.bufferedAmount > highWater) await new Promise((r) => setTimeout(r, 5));
    },
    take: (type, handler) => {
      handlers.set(type, handler as (m: ServerMessage) => void);
      for (let i = pending.length - 1; i >= 0; i--) if (pending[i].type === type) pending.splice(i, 1);
    },
    next: (type, timeoutMs = 10_000) => {
      const i = pending.findIndex((p) => p.type === type);
      if (i >= 0) return Promise.resolve(pending.splice(i, 1)[0] as never);
      return new Promise((resolve, reject) => {
        const waiter = {
          type,
          resolve: (msg: ServerMessage) => {
            clearTimeout(timer);
            resolve(msg as never);
          },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`no ${type} message within ${timeoutMs} ms; got ${JSON.stringify(pending).slice(0, 500)}`));
        }, timeoutMs);
        waiters.push(waiter);
        void closed.then((c) => reject(new Error(`the connection closed (${c.code} ${c.reason}) while waiting for ${type}`)));
      });
    },
    close: () => closeSocket(ws),
  };
}

/** Closes every socket a test opened and waits until each is closed. */
export async function closeRawWorkers(open: WebSocket[]): Promise<void> {
  await Promise.all(open.splice(0).map(closeSocket));
}

function closeSocket(ws: WebSocket): Promise<void> {
  return new Promise<void>((resolve) => {
    if (ws.readyState === WebSocket.CLOSED) return resolve();
    ws.once("close", () => resolve());
    if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
    else ws.close();
    setTimeout(() => {
      ws.terminate();
      resolve();
    }, 2_000).unref();
  });
}

/** A well-behaved machine: welcomed, heartbeating, answering each job. */
export interface WorkerDouble extends RawWorker {
  machineId: string;
  /** Every job the service sent, in order (answered already, if `answer` had events for it). */
  jobs: { jobId: string; job: Job }[];
  /** Resolves with the first `n` jobs once that many arrived in all (fails after `timeoutMs`). */
  waitJobs(n: number, timeoutMs?: number): Promise<{ jobId: string; job: Job }[]>;
}

/** What the double answers a job with: its events, in order (the last one `done` or `failed`). */
export type JobAnswer = (job: Job, n: number) => JobEvent[];

export const DOUBLE_RUNTIMES: RuntimeAdvert[] = [{ name: "ollama", kind: "model", costClass: "user_hardware", models: ["double-model"] }];

/** Answers no job by itself: the test sends each job's events. */
export const answerNothing: JobAnswer = () => [];

/**
 * By default: a model turn offered tools calls the first of them (so the run waits
 * on the app), one offered none answers `text`.
 */
export const callFirstTool =
  (text: string): JobAnswer =>
  (job) => {
    const usage = { inputTokens: 3, outputTokens: 2 };
    if (job.kind === "model_turn" && job.tools?.length) {
      return [
        { type: "tool_call", id: "c1", name: job.tools[0].function.name, arguments: "{}" },
        { type: "done", finishReason: "tool_calls", output: "", usage },
      ];
    }
    return [
      { type: "text_delta", text },
      { type: "done", finishReason: "stop", output: text, usage },
    ];
  };

/** Connects, says hello with `runtimes` and resolves once welcomed; then heartbeats until closed and answers every job with `answer`. */
export async function connectWorkerDouble(baseUrl: string, token: string, answer: JobAnswer, runtimes = DOUBLE_RUNTIMES, open: WebSocket[] = []): Promise<WorkerDouble> {
  const raw = await connectRawWorker(baseUrl, token, open);
  const jobs: WorkerDouble["jobs"] = [];
  raw.take("job", (m) => {
    jobs.push(m.payload);
    for (const event of answer(m.payload.job, jobs.length)) raw.send(workerMessage("job_event", { jobId: m.payload.jobId, event }));
  });
  raw.send(workerMessage("hello", { client: "worker-double", version: "1", runtimes }));
  const welcome = await raw.next("welcome");
  const beat = setInterval(() => raw.send(workerMessage("heartbeat", { busy: [] })), Math.max(1, welcome.payload.heartbeatSeconds - 2) * 1000);
  beat.unref();
  void raw.closed.then(() => clearInterval(beat));
  const waitJobs = async (n: number, timeoutMs = 20_000) => {
    await pollUntil(async () => jobs.length, (k) => k >= n, timeoutMs, `${n} jobs reached the machine`);
    return jobs.slice(0, n);
  };
  return Object.assign(raw, { machineId: welcome.payload.machineId, jobs, waitJobs });
}
