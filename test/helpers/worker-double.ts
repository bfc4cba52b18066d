import WebSocket from "ws";
import { WORKER_CONNECT_PATH, workerMessage, type Job, type JobEvent, type RuntimeAdvert, type ServerMessage } from "@svc/contract";

/**
 * A paired machine's worker as a test double speaking the real protocol over a
 * real WebSocket: it says hello with its runtimes, heartbeats at the interval the
 * service asks for, and answers each job with what `answer` returns. Lighter than
 * a `svc-worker` process when a suite needs many machines online.
 */
export interface WorkerDouble {
  machineId: string;
  /** Every job the service sent, in order. */
  jobs: { jobId: string; job: Job }[];
  /** Every message the service sent, in order. */
  received: ServerMessage[];
  /** Sends a frame of its own (anything: the double may misbehave). */
  send(message: unknown): void;
  close(): Promise<void>;
}

/** What the double answers a job with: its events, in order (the last one `done` or `failed`). */
export type JobAnswer = (job: Job, n: number) => JobEvent[];

export const DOUBLE_RUNTIMES: RuntimeAdvert[] = [{ name: "ollama", kind: "model", costClass: "user_hardware", models: ["double-model"] }];

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

export async function connectWorkerDouble(baseUrl: string, token: string, answer: JobAnswer, runtimes = DOUBLE_RUNTIMES): Promise<WorkerDouble> {
  const ws = new WebSocket(`${baseUrl.replace(/^http/, "ws")}${WORKER_CONNECT_PATH}`, { headers: { authorization: `Bearer ${token}` } });
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`the worker handshake answered ${res.statusCode}`)));
  });
  ws.on("error", () => {});
  const send = (m: unknown) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify(m));
  const jobs: WorkerDouble["jobs"] = [];
  const received: ServerMessage[] = [];
  let beat: NodeJS.Timeout | undefined;
  const welcomed = new Promise<string>((resolve, reject) => {
    ws.on("message", (data) => {
      const m = JSON.parse(data.toString("utf8")) as ServerMessage;
      received.push(m);
      if (m.type === "welcome") {
        beat = setInterval(() => send(workerMessage("heartbeat", { busy: [] })), Math.max(1, m.payload.heartbeatSeconds - 2) * 1000);
        beat.unref();
        resolve(m.payload.machineId);
      } else if (m.type === "job") {
        jobs.push(m.payload);
        for (const event of answer(m.payload.job, jobs.length)) send(workerMessage("job_event", { jobId: m.payload.jobId, event }));
      }
    });
    ws.once("close", (code) => reject(new Error(`the worker connection closed (${code}) before welcome`)));
  });
  send(workerMessage("hello", { client: "worker-double", version: "1", runtimes }));
  const machineId = await welcomed;
  return {
    machineId,
    jobs,
    received,
    send,
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(beat);
        if (ws.readyState === WebSocket.CLOSED) return resolve();
        ws.once("close", () => resolve());
        ws.close();
        setTimeout(() => (ws.terminate(), resolve()), 2_000).unref();
      }),
  };
}
