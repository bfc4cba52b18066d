import WebSocket from "ws";
import { parseFrame, ServerMessage, WORKER_CLOSE, WORKER_MAX_FRAME_BYTES, workerMessage, type Job, type JobEvent, type WorkerMessage } from "@svc/contract";
import type { Credentials } from "./store.js";
import type { Runtime } from "./runtimes/runtime.js";
import { CLIENT_NAME, CLIENT_VERSION } from "./version.js";

export interface ConnectOptions {
  credentials: Credentials;
  runtimes: Runtime[];
  print: (line: string) => void;
  signal: AbortSignal;
  /** Reconnect backoff: the first wait and the longest (ms). */
  backoff?: { initialMs: number; maxMs: number };
}

/** How serving ended. */
export type ServeEnd = { reason: "stopped" } | { reason: "revoked"; message: string } | { reason: "refused"; status: number; message: string };

interface RunningJob {
  runtime: string;
  abort: AbortController;
  permissions: Map<string, (answer: { allow: boolean; message?: string }) => void>;
}

/**
 * The worker's connection to the service: outbound WebSocket with the pairing
 * token in the handshake, hello with the runtimes, heartbeats, jobs run on the
 * named runtime only, their events streamed back. Reconnects with exponential
 * backoff and full jitter whenever the connection drops (a server restart is
 * routine); stops for good only when the machine was removed or the token refused.
 */
export async function serve(opts: ConnectOptions): Promise<ServeEnd> {
  const { initialMs, maxMs } = opts.backoff ?? { initialMs: 500, maxMs: 30_000 };
  let attempt = 0;
  while (!opts.signal.aborted) {
    const outcome = await connectOnce(opts, () => (attempt = 0));
    if (outcome.end) return outcome.end;
    const wait = Math.round(Math.random() * Math.min(maxMs, initialMs * 2 ** attempt++));
    opts.print(`  connection lost (${outcome.why}); reconnecting in ${(wait / 1000).toFixed(1)} s`);
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, wait);
      opts.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
    });
  }
  return { reason: "stopped" };
}

function connectOnce(opts: ConnectOptions, welcomed: () => void): Promise<{ end?: ServeEnd; why: string }> {
  const { credentials, runtimes, print, signal } = opts;
  const jobs = new Map<string, RunningJob>();
  return new Promise((resolve) => {
    const ws = new WebSocket(credentials.connectUrl, {
      headers: { authorization: `Bearer ${credentials.pairingToken}` },
      maxPayload: WORKER_MAX_FRAME_BYTES,
      handshakeTimeout: 15_000,
    });
    let heartbeat: NodeJS.Timeout | null = null;
    let settled = false;
    const finish = (value: { end?: ServeEnd; why: string }) => {
      if (settled) return;
      settled = true;
      if (heartbeat) clearInterval(heartbeat);
      for (const job of jobs.values()) job.abort.abort();
      signal.removeEventListener("abort", onAbort);
      resolve(value);
    };
    const onAbort = () => {
      ws.close(1000, "the worker is stopping");
      finish({ end: { reason: "stopped" }, why: "stopped" });
    };
    signal.addEventListener("abort", onAbort, { once: true });

    const send = (m: WorkerMessage) => ws.readyState === ws.OPEN && ws.send(JSON.stringify(m));

    ws.on("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => {
        let message = `the server answered ${res.statusCode}`;
        try {
          message = (JSON.parse(body) as { error?: { message?: string } }).error?.message ?? message;
        } catch {
          // not the envelope
        }
        // 401: the token is unknown or revoked; pairing again is the only way back.
        if (res.statusCode === 401) finish({ end: { reason: "refused", status: 401, message }, why: message });
        else finish({ why: message });
      });
    });
    ws.on("error", (err) => finish({ why: err.message }));
    ws.on("open", () => send(workerMessage("hello", { client: CLIENT_NAME, version: CLIENT_VERSION, runtimes: runtimes.map((r) => r.advert) })));
    ws.on("close", (code, reason) => {
      const text = reason.toString() || `code ${code}`;
      if (code === WORKER_CLOSE.revoked) finish({ end: { reason: "revoked", message: text }, why: text });
      else finish({ why: text });
    });
    let heardAt = Date.now();
    ws.on("pong", () => (heardAt = Date.now()));
    ws.on("message", (data, isBinary) => {
      heardAt = Date.now();
      if (isBinary) return;
      const parsed = parseFrame(ServerMessage, data.toString("utf8"));
      if (!parsed.ok) {
        send(workerMessage("error", { code: "bad_message", message: parsed.reason }));
        return;
      }
      const m = parsed.message;
      switch (m.type) {
        case "welcome": {
          welcomed();
          print(`✓ Connected to ${m.payload.appName} as ${m.payload.machineId}; serving ${runtimes.map((r) => r.advert.name).join(", ") || "nothing"}.`);
          if (heartbeat) clearInterval(heartbeat);
          // A link that died without a close (a network changed, a path gone) is noticed here, not by TCP minutes later:
          // each heartbeat goes with a ping, and a server heard from neither way for 4.5 heartbeats is taken for gone.
          const silentMs = m.payload.heartbeatSeconds * 4500;
          heartbeat = setInterval(() => {
            if (Date.now() - heardAt > silentMs) {
              ws.terminate();
              return finish({ why: `the server went silent for ${Math.round(silentMs / 1000)} s` });
            }
            ws.ping();
            send(workerMessage("heartbeat", { busy: [...new Set([...jobs.values()].map((j) => j.runtime))] }));
          }, m.payload.heartbeatSeconds * 1000);
          return;
        }
        case "job":
          return void runJob(m.payload.jobId, m.payload.job);
        case "cancel":
          jobs.get(m.payload.jobId)?.abort.abort();
          return;
        case "permission_response":
          jobs.get(m.payload.jobId)?.permissions.get(m.payload.requestId)?.({ allow: m.payload.allow, message: m.payload.message });
          return;
        case "error":
          print(`  the server said: ${m.payload.message}`);
          return;
      }
    });

    async function runJob(jobId: string, job: Job) {
      const emit = (event: JobEvent) => send(workerMessage("job_event", { jobId, event }));
      // Only what the server asked for, on a runtime this machine serves.
      const runtime = runtimes.find((r) => r.advert.name === job.runtime);
      if (!runtime) return emit({ type: "failed", code: "unknown_runtime", message: `This machine does not serve ${job.runtime}.` });
      const running: RunningJob = { runtime: runtime.advert.name, abort: new AbortController(), permissions: new Map() };
      jobs.set(jobId, running);
      const what = job.kind === "model_turn" ? `${job.runtime} ${job.model}` : job.runtime;
      print(`→ ${jobId} ${job.kind} on ${what}`);
      let last: JobEvent | null = null;
      try {
        await runtime.run(job, {
          emit: (e) => ((last = e), emit(e)),
          signal: running.abort.signal,
          askPermission: (req) =>
            new Promise((answer) => {
              running.permissions.set(req.requestId, (a) => (running.permissions.delete(req.requestId), answer(a)));
              emit({ type: "permission_request", ...req });
            }),
        });
      } catch (err) {
        last = { type: "failed", code: "runtime_error", message: (err as Error).message };
        emit(last);
      } finally {
        jobs.delete(jobId);
      }
      const end = last as JobEvent | null;
      if (end?.type === "done") print(`✓ ${jobId} done (${end.usage.inputTokens} in, ${end.usage.outputTokens} out)`);
      else if (end?.type === "failed") print(`✗ ${jobId} failed: ${end.code}: ${end.message}`);
    }
  });
}

/** Asks the service to remove this machine (`unpair`); resolves once it has, or says why not. */
export function unpairRemotely(credentials: Credentials, timeoutMs = 10_000): Promise<{ ok: boolean; message: string }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(credentials.connectUrl, { headers: { authorization: `Bearer ${credentials.pairingToken}` }, handshakeTimeout: timeoutMs });
    const timer = setTimeout(() => (ws.terminate(), resolve({ ok: false, message: "the server did not answer in time" })), timeoutMs);
    const done = (r: { ok: boolean; message: string }) => (clearTimeout(timer), resolve(r));
    ws.on("open", () => ws.send(JSON.stringify(workerMessage("unpair", {}))));
    ws.on("close", (code, reason) => done(code === WORKER_CLOSE.revoked ? { ok: true, message: "removed" } : { ok: false, message: reason.toString() || `closed (${code})` }));
    ws.on("unexpected-response", (_req, res) => {
      // Already refused: the machine is gone from the account anyway.
      done(res.statusCode === 401 ? { ok: true, message: "already removed" } : { ok: false, message: `the server answered ${res.statusCode}` });
      ws.terminate();
    });
    ws.on("error", (err) => done({ ok: false, message: err.message }));
  });
}
