import os from "node:os";
import path from "node:path";
import WebSocket from "ws";
import { parseFrame, pingDue, ServerMessage, type RuntimeAdvert, WORKER_CLOSE, WORKER_MAX_FRAME_BYTES, WORKER_FEATURES, WORKER_MAX_JOB_FRAME_BYTES, workerMessage, type Job, type JobEvent, type WorkerMessage } from "@svc/contract";
import type { Credentials } from "./store.js";
import type { Runtime, ToolAnswer } from "./runtimes/runtime.js";
import { machinePolicy, type MachinePolicy } from "./policy/index.js";
import { CLIENT_NAME, CLIENT_VERSION } from "./version.js";
import { RUNS_FROM } from "./layout.js";
import { JobSpans } from "./telemetry.js";
import { WindowBook } from "./runtimes/usage-windows.js";
import { redact } from "./redact.js";
import { JobLog } from "./job-log.js";
import { JobRecords, type JobRecord } from "./job-records.js";
import { randomUUID } from "node:crypto";
import type { SessionBook } from "./sessions.js";

/** User messages kept for a job whose CLI does not listen yet, at most (the rest are dropped: said in the worker's terminal line). */
const MAX_EARLY_MESSAGES = 64;
/** How long the user keeps agent CLI sessions between runs (`sessions.keepDays`, default 7). */
const keepDaysOf = (served: Served): number => served.policy.policy.sessions?.keepDays ?? 7;
const runtimeOf = (served: Served, name: string): Runtime | undefined => served.runtimes.find((r) => r.advert.name === name);

export interface ConnectOptions {
  credentials: Credentials;
  runtimes: Runtime[];
  /** Runtimes found in a version this worker does not support: said in `hello` (`supported: false`) so the app can show them; never run. */
  unsupported?: RuntimeAdvert[];
  print: (line: string) => void;
  signal: AbortSignal;
  /** The user's policy for agent CLIs (default: the safe defaults). */
  policy?: MachinePolicy;
  /** Reconnect backoff: the first wait and the longest (ms). */
  backoff?: { initialMs: number; maxMs: number };
  /** Where a job's unacknowledged events spill past their memory bound (`JobLog`); default: a folder under the system's temporary one. */
  jobsDir?: string;
  /**
   * Registers the caller's way to change what is served while serving (the policy or a CLI changed on disk:
   * `main.ts` finds the runtimes again): the next jobs use it, and the service is told the new runtimes at once
   * (`runtimes`). Jobs already running keep what they started with.
   */
  watch?: (apply: (next: Served) => void) => void;
  /** The agent CLI sessions kept between runs (a conversation's, under the user's `sessions.keepDays`); unset: none kept. */
  sessions?: SessionBook;
}

/** What the worker serves now: its runtimes, those found and not served, and the user's policy. */
export interface Served {
  runtimes: Runtime[];
  unsupported: RuntimeAdvert[];
  policy: MachinePolicy;
}

/** How serving ended. */
export type ServeEnd = { reason: "stopped" } | { reason: "revoked"; message: string } | { reason: "refused"; status: number; message: string };

/**
 * Frames this worker reads: job frames up to `WORKER_MAX_JOB_FRAME_BYTES` (said in
 * `hello`); a bigger one (from a service that does not check) up to this ceiling
 * fails its job (`frame_too_large`) and keeps the link; only beyond it does the
 * link drop (1009).
 */
const READ_CEILING_BYTES = 4 * WORKER_MAX_JOB_FRAME_BYTES;
/** Text deltas go at most once per this long (`textBatcher`). */
export const TEXT_WINDOW_MS = 20;
/** ...and sent in pieces of at most this many characters, so no frame passes `WORKER_MAX_FRAME_BYTES`. */
export const TEXT_PIECE_CHARS = 64 * 1024;
/** A runtime's subscription windows are told at most this often (a change to or from a spent window at once). */
export const WINDOWS_EVERY_MS = 5000;

interface RunningJob {
  runtime: string;
  abort: AbortController;
  permissions: Map<string, (answer: { allow: boolean; message?: string }) => void>;
  /** App tool calls waiting for their result, by call id. */
  toolCalls: Map<string, (answer: ToolAnswer) => void>;
  /** The connection its events go out on; null while its link is lost (a resumable job waits for `resume_job`). */
  link: Link | null;
  /**
   * A resumable job's events not acknowledged yet (an agent run sent by a service that resumes jobs):
   * numbered, kept through a lost link for the service's grace, sent again from where the service
   * stored them. Null: the job ends with its link, as it always did.
   */
  log: JobLog | null;
  /** The last event number given. */
  n: number;
  /** Its `done` or `failed` was said (kept only until acknowledged). */
  ended: boolean;
  /** An event would not fit a frame: the job failed, nothing more of it is sent. */
  tooLarge: boolean;
  /** How long it is kept after its link drops (the service's grace), and the timer doing so. */
  graceMs: number;
  graceTimer: NodeJS.Timeout | null;
  /** What forgetting it also removes (its record on disk, the CLI's saved session). */
  onForget: (() => void) | null;
  /** Passes a user's message to the running CLI (set once its runtime listens); those before wait in `early`. */
  steer: ((text: string) => void) | null;
  early: string[];
}

/** Jobs an earlier run of this worker left on disk (it was killed or crashed), until the service asks for them back or their grace passes. */
type Restored = Map<string, { record: JobRecord; timer: NodeJS.Timeout }>;

/** One connection to the service, as a job sees it (a resumed job moves to the connection it was resumed on). */
interface Link {
  sendFrame(frame: string): void;
  /** Sends a message other than a job event, if it fits a frame. */
  send(m: WorkerMessage): void;
  features: Set<string>;
  /** A runtime's windows changed: told to this connection's service. */
  windowsChanged(runtime: string): void;
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
  // The subscription windows each agent CLI reported, kept across reconnections: told again to each service that takes them.
  const windows = new Map<string, WindowBook>();
  // Jobs outlive a connection when they can be resumed (agent runs, for the service's grace).
  const jobs = new Map<string, RunningJob>();
  const jobsDir = opts.jobsDir ?? path.join(os.tmpdir(), `svc-worker-jobs-${process.pid}`);
  const records = new JobRecords(jobsDir);
  const restored: Restored = new Map();
  const served: Served = { runtimes: opts.runtimes, unsupported: opts.unsupported ?? [], policy: opts.policy ?? machinePolicy() };
  /** Tells the service the runtimes served now, on the link that is up (set while one is). */
  const announce: { now: (() => void) | null } = { now: null };
  opts.watch?.((next) => {
    Object.assign(served, next);
    announce.now?.();
  });
  for (const record of records.load()) {
    // Not asked for within its grace: the service has ended its run; the record and the CLI's session go.
    const timer = setTimeout(() => restored.has(record.jobId) && dropRestored(record.jobId), record.graceMs);
    timer.unref?.();
    restored.set(record.jobId, { record, timer });
  }
  const dropRestored = (jobId: string) => {
    const r = restored.get(jobId);
    if (!r) return;
    clearTimeout(r.timer);
    restored.delete(jobId);
    records.remove(jobId);
    const job = r.record.job;
    // A conversation's session stays as the user's policy says (the next follow-up may resume it); one kept only for the job goes.
    if (job.kind === "agent_run" && job.session && opts.sessions && keepDaysOf(served) > 0) {
      opts.sessions.keep({ id: job.session.id, runtime: job.runtime, ...(r.record.cliSessionId ? { cliId: r.record.cliSessionId } : {}), workdir: runtimeOf(served, job.runtime)?.workdir ?? "" });
    } else runtimeOf(served, job.runtime)?.sessions?.forget(r.record.cliSessionId ?? r.record.sessionId, served.policy.allowedEnv);
  };
  while (!opts.signal.aborted) {
    const outcome = await connectOnce(opts, () => (attempt = 0), windows, jobs, { dir: jobsDir, records, restored, drop: dropRestored }, served, announce);
    if (outcome.end) return outcome.end;
    const wait = Math.round(Math.random() * Math.min(maxMs, initialMs * 2 ** attempt++));
    opts.print(`  connection lost (${outcome.why}); reconnecting in ${(wait / 1000).toFixed(1)} s`);
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, wait);
      opts.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
    });
  }
  for (const job of jobs.values()) forget(job);
  jobs.clear();
  for (const r of restored.values()) clearTimeout(r.timer);
  return { reason: "stopped" };
}

/** A job given up: its CLI stopped (if still running), its kept events gone. */
function forget(job: RunningJob): void {
  if (job.graceTimer) clearTimeout(job.graceTimer);
  job.abort.abort();
  job.log?.close();
  job.onForget?.();
  job.onForget = null;
}

/** Where jobs are kept on disk, and those an earlier run of the worker left. */
interface Kept {
  dir: string;
  records: JobRecords;
  restored: Restored;
  drop(jobId: string): void;
}

function connectOnce(
  opts: ConnectOptions,
  welcomed: () => void,
  windows: Map<string, WindowBook>,
  jobs: Map<string, RunningJob>,
  kept: Kept,
  served: Served,
  announce: { now: (() => void) | null },
): Promise<{ end?: ServeEnd; why: string }> {
  const { credentials, print, signal } = opts;
  return new Promise((resolve) => {
    const ws = new WebSocket(credentials.connectUrl, {
      headers: { authorization: `Bearer ${credentials.pairingToken}` },
      maxPayload: READ_CEILING_BYTES,
      handshakeTimeout: 15_000,
    });
    let heartbeat: NodeJS.Timeout | null = null;
    /** What the service announced it takes beyond the first catalog (`welcome.features`). */
    let features = new Set<string>();
    /** The service's grace for a lost machine (`welcome.jobGraceSeconds`), in ms. */
    let graceMs = 0;
    let settled = false;
    const link: Link = { sendFrame: (frame) => ws.readyState === ws.OPEN && ws.send(frame), send: (m) => send(m), features, windowsChanged: (runtime) => sendWindows(runtime) };
    const finish = (value: { end?: ServeEnd; why: string }) => {
      if (settled) return;
      settled = true;
      if (heartbeat) clearInterval(heartbeat);
      announce.now = null;
      for (const w of windowsSent.values()) if (w.timer) clearTimeout(w.timer);
      // The jobs on this link: a resumable one is kept for the service's grace (its CLI runs on, its events are kept
      // for the instance the machine reconnects to); the others stop, as the service runs them again or ends them.
      for (const [jobId, job] of jobs) {
        if (job.link !== link) continue;
        job.link = null;
        if (!job.log || value.end) {
          forget(job);
          jobs.delete(jobId);
          continue;
        }
        print(`  keeping ${jobId} for ${Math.round(job.graceMs / 1000)} s while the link is down`);
        keepFor(jobId, job, job.graceMs);
      }
      signal.removeEventListener("abort", onAbort);
      resolve(value);
    };
    /** Keeps a job off any link (or an ended one waiting for its acknowledgement) for `ms`, then gives it up (the service has failed its run by then). */
    const keepFor = (jobId: string, job: RunningJob, ms: number) => {
      if (job.graceTimer) clearTimeout(job.graceTimer);
      job.graceTimer = setTimeout(() => {
        if (jobs.get(jobId) !== job || (job.link && !job.ended)) return;
        print(`✗ ${jobId}: ${job.ended ? "its end was never acknowledged" : "its link was down past the service's grace; the job is stopped"}`);
        forget(job);
        jobs.delete(jobId);
      }, ms);
      job.graceTimer.unref?.();
    };
    const onAbort = () => {
      ws.close(1000, "the worker is stopping");
      finish({ end: { reason: "stopped" }, why: "stopped" });
    };
    signal.addEventListener("abort", onAbort, { once: true });

    /** Sends a message other than a job's event (`sendEvent`); one that would pass the service's frame limit is never sent (the service would drop the link). */
    const send = (m: WorkerMessage): void => {
      if (ws.readyState !== ws.OPEN) return;
      const frame = JSON.stringify(m);
      // At most 3 UTF-8 bytes per UTF-16 unit: a frame that short is under the limit without counting its bytes.
      if (frame.length * 3 <= WORKER_MAX_FRAME_BYTES) return void ws.send(frame);
      const bytes = Buffer.byteLength(frame);
      if (bytes <= WORKER_MAX_FRAME_BYTES) return void ws.send(frame);
      print(`  not sent: a ${m.type} message of ${bytes} bytes is over the ${WORKER_MAX_FRAME_BYTES}-byte frame limit`);
    };

    /**
     * A job's event, out on the job's link: numbered and kept first when the job is
     * resumable. One that would pass the service's frame limit is never sent (the
     * service would drop the link): the job fails instead (`frame_too_large`), or,
     * for a `done`, its end goes without its output (the service keeps the text
     * streamed before it).
     */
    const sendEvent = (jobId: string, job: RunningJob, event: JobEvent): void => {
      if (job.tooLarge) return;
      let frame = JSON.stringify(workerMessage("job_event", { jobId, event, ...(job.log ? { n: job.n + 1 } : {}) }));
      // At most 3 UTF-8 bytes per UTF-16 unit: a frame that short is under the limit without counting its bytes.
      const bytes = frame.length * 3 <= WORKER_MAX_FRAME_BYTES ? 0 : Buffer.byteLength(frame);
      if (bytes > WORKER_MAX_FRAME_BYTES) {
        if (event.type === "done" && event.output) return sendEvent(jobId, job, { ...event, output: "" });
        print(`✗ ${jobId}: an event of ${bytes} bytes is over the ${WORKER_MAX_FRAME_BYTES}-byte frame limit; the job fails`);
        job.tooLarge = true;
        job.abort.abort();
        event = { type: "failed", code: "frame_too_large", message: `The machine produced an event of ${bytes} bytes, more than the ${WORKER_MAX_FRAME_BYTES}-byte frame limit of the link.` };
        frame = JSON.stringify(workerMessage("job_event", { jobId, event, ...(job.log ? { n: job.n + 1 } : {}) }));
      }
      if (job.log) {
        job.n++;
        if (!job.log.append(job.n, frame)) {
          // Kept past its bound (a link down long, a CLI very talkative): it can no longer be resumed exactly, so it stops here.
          print(`✗ ${jobId}: more unacknowledged events than the worker keeps; the job is stopped`);
          job.abort.abort();
        }
      }
      job.link?.sendFrame(frame);
    };

    /** A runtime's windows as known now, to a service that takes them (an older one would count the message as bad). */
    const windowsSent = new Map<string, { at: number; spent: boolean; timer: NodeJS.Timeout | null }>();
    const sendWindows = (runtime: string) => {
      const book = windows.get(runtime);
      if (!book || !features.has(WORKER_FEATURES.runtimeLimits)) return;
      // At most one report per runtime every WINDOWS_EVERY_MS (the service allows one per 2 s past a burst), the last one
      // sent once that passed; a window becoming spent, or no longer, goes at once: routing depends on it.
      const last = windowsSent.get(runtime) ?? { at: -Infinity, spent: false, timer: null };
      windowsSent.set(runtime, last);
      const spent = book.spent() !== null;
      const wait = last.at + WINDOWS_EVERY_MS - Date.now();
      if (wait > 0 && spent === last.spent) {
        last.timer ??= setTimeout(() => ((last.timer = null), sendWindows(runtime)), wait);
        return;
      }
      if (last.timer) clearTimeout(last.timer);
      Object.assign(last, { at: Date.now(), spent, timer: null });
      send(workerMessage("runtime_limits", { runtime, windows: book.list(), updatedAt: new Date().toISOString() }));
    };

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
    // Within the catalog's bounds (at most 1,000 models of at most 256 characters each), so the hello is never refused for its size.
    const adverts = () => [...served.runtimes.map((r) => ({ ...r.advert, models: r.advert.models.filter((m) => m.length <= 256).slice(0, 1000) })), ...served.unsupported];
    ws.on("open", () => send(workerMessage("hello", { client: CLIENT_NAME, version: CLIENT_VERSION, runtimes: adverts(), maxJobFrameBytes: WORKER_MAX_JOB_FRAME_BYTES, features: [WORKER_FEATURES.jobResume, ...(opts.sessions ? [WORKER_FEATURES.sessions] : [])] })));
    ws.on("close", (code, reason) => {
      const text = reason.toString() || `code ${code}`;
      if (code === WORKER_CLOSE.revoked) finish({ end: { reason: "revoked", message: text }, why: text });
      else finish({ why: text });
    });
    let heardAt = Date.now();
    ws.on("pong", () => (heardAt = Date.now()));
    ws.on("message", (data: Buffer, isBinary) => {
      heardAt = Date.now();
      if (isBinary) return;
      if (data.length > WORKER_MAX_JOB_FRAME_BYTES) {
        // Too large to take on, small enough to read its job id: that job fails, the link stays.
        const jobId = /"jobId":"([^"]{1,128})"/.exec(data.subarray(0, 512).toString("utf8"))?.[1];
        const message = `The service sent a frame of ${data.length} bytes, more than the ${WORKER_MAX_JOB_FRAME_BYTES} bytes this worker takes: the conversation is too large.`;
        print(`✗ ${jobId ?? "a frame"}: ${message}`);
        if (jobId) send(workerMessage("job_event", { jobId, event: { type: "failed", code: "frame_too_large", message } }));
        return;
      }
      const parsed = parseFrame(ServerMessage, data.toString("utf8"));
      if (!parsed.ok) {
        send(workerMessage("error", { code: "bad_message", message: parsed.reason }));
        return;
      }
      const m = parsed.message;
      switch (m.type) {
        case "welcome": {
          welcomed();
          features.clear();
          for (const f of m.payload.features ?? []) features.add(f);
          graceMs = (m.payload.jobGraceSeconds ?? 0) * 1000;
          print(`✓ Connected to ${m.payload.appName} as ${m.payload.machineId}; serving ${served.runtimes.map((r) => r.advert.name).join(", ") || "nothing"}.`);
          announce.now = () => {
            send(workerMessage("runtimes", { runtimes: adverts() }));
            print(`  now serving ${served.runtimes.map((r) => r.advert.name).join(", ") || "nothing"}`);
          };
          // Once per process, not on every reconnect.
          if (m.payload.update && !toldUpdate) {
            toldUpdate = true;
            print(updateLine(m.payload.update));
          }
          for (const runtime of windows.keys()) sendWindows(runtime);
          // The jobs kept through a lost link: the service resumes those whose run goes on and cancels the others.
          const held = [...[...jobs].filter(([, j]) => j.log && !j.link).map(([jobId, j]) => ({ jobId, lastN: j.n })), ...[...kept.restored.keys()].map((jobId) => ({ jobId, lastN: 0 }))];
          if (held.length && features.has(WORKER_FEATURES.jobResume)) send(workerMessage("jobs_held", { jobs: held.slice(0, 256) }));
          if (heartbeat) clearInterval(heartbeat);
          // A link that died without a close (a network changed, a path gone) is noticed here, not by TCP minutes later:
          // a server heard from neither way (a message, a pong) for 4.5 heartbeats is taken for gone.
          const beatMs = m.payload.heartbeatSeconds * 1000;
          const silentMs = beatMs * 4.5;
          heartbeat = setInterval(() => {
            const quietMs = Date.now() - heardAt;
            if (quietMs > silentMs) {
              ws.terminate();
              return finish({ why: `the server went silent for ${Math.round(silentMs / 1000)} s` });
            }
            if (pingDue(quietMs, beatMs)) ws.ping();
            send(workerMessage("heartbeat", { busy: [...new Set([...jobs.values()].filter((j) => j.link === link && !j.ended).map((j) => j.runtime))] }));
          }, m.payload.heartbeatSeconds * 1000);
          return;
        }
        case "job":
          return void runJob(m.payload.jobId, m.payload.job, m.payload.traceparent);
        case "cancel": {
          const job = jobs.get(m.payload.jobId);
          // Left by an earlier run of the worker and not wanted: its record and session go.
          if (!job) return kept.drop(m.payload.jobId);
          job.abort.abort();
          // One kept off its link and not resumed (its run ended meanwhile) is forgotten now.
          if (!job.link) {
            print(`✗ ${m.payload.jobId}: its run ended while the link was down; the job is stopped`);
            forget(job);
            jobs.delete(m.payload.jobId);
          }
          return;
        }
        case "job_ack": {
          const job = jobs.get(m.payload.jobId);
          if (!job?.log || job.link !== link) return;
          job.log.ack(m.payload.n);
          // Its end stored: nothing of it is needed any more.
          if (job.ended && m.payload.n >= job.n) (forget(job), jobs.delete(m.payload.jobId));
          return;
        }
        case "resume_job":
          return resume(m.payload.jobId, m.payload.after);
        case "permission_response":
          jobs.get(m.payload.jobId)?.permissions.get(m.payload.requestId)?.({ allow: m.payload.allow, message: m.payload.message });
          return;
        case "tool_result":
          jobs.get(m.payload.jobId)?.toolCalls.get(m.payload.callId)?.({ output: m.payload.output, isError: m.payload.isError });
          return;
        case "user_message": {
          const job = jobs.get(m.payload.jobId);
          if (!job || job.ended) return;
          print(`  ${m.payload.jobId}: a message from the user (${m.payload.content.length} characters) passed to ${job.runtime}`);
          if (job.steer) job.steer(m.payload.content);
          // Kept until its CLI listens (a moment after the job began), within a bound: a runtime that never listens holds no more.
          else if (job.early.length < MAX_EARLY_MESSAGES) job.early.push(m.payload.content);
          return;
        }
        case "error":
          print(`  the server said: ${m.payload.message}`);
          return;
      }
    });

    /**
     * `resume_job`: a job kept through a lost link goes on on this connection, its
     * events after `after` (what the service stored) sent again first. A job this
     * worker does not hold (restarted since, or given up past the grace) fails `job_not_held`.
     */
    function resume(jobId: string, after: number) {
      const left = !jobs.has(jobId) ? kept.restored.get(jobId) : undefined;
      if (left) {
        // Left by an earlier run of the worker: the CLI picks its saved session up, its events numbered after what the service stored.
        clearTimeout(left.timer);
        kept.restored.delete(jobId);
        print(`↻ ${jobId} resumed after a restart of the worker (its ${left.record.job.runtime} session ${left.record.sessionId})`);
        return void runJob(jobId, left.record.job, undefined, { sessionId: left.record.sessionId, ...(left.record.cliSessionId ? { cliSessionId: left.record.cliSessionId } : {}), after });
      }
      const job = jobs.get(jobId);
      const frames = job?.log?.since(after);
      if (!job || !frames) {
        if (job) (forget(job), jobs.delete(jobId));
        const message = job ? `The worker no longer holds the events of job ${jobId} after ${after}.` : `This worker does not hold job ${jobId} (it was restarted, or the job was given up past the grace).`;
        return send(workerMessage("job_event", { jobId, event: { type: "failed", code: "job_not_held", message } }));
      }
      if (job.graceTimer) clearTimeout(job.graceTimer);
      job.graceTimer = null;
      job.link = link;
      job.graceMs = graceMs;
      print(`↻ ${jobId} resumed after event ${after} (${frames.length} sent again)`);
      for (const frame of frames) link.sendFrame(frame);
      // Ended while away and its end now sent: kept until acknowledged, at most the grace.
      if (job.ended) keepFor(jobId, job, graceMs);
    }

    async function runJob(jobId: string, job: Job, traceparent?: string, restart?: { sessionId: string; cliSessionId?: string; after: number }) {
      /** Its spans, only when the user's policy lets this machine send traces and the service asked for them. */
      let spans: JobSpans | null = null;
      // Only what the server asked for, on a runtime this machine serves, within its cap; under the policy of now.
      const runtime = runtimeOf(served, job.runtime);
      const policy = served.policy;
      // Resumable: an agent CLI's run (its own loop cannot be run again), for a service that resumes jobs and waits for a lost machine.
      const resumable = job.kind === "agent_run" && features.has(WORKER_FEATURES.jobResume) && graceMs > 0;
      // A conversation's session (the service names it: a follow-up resumes it), kept after the job as the user's policy says.
      const conversation = job.kind === "agent_run" && job.session && runtime?.sessions && opts.sessions ? job.session : undefined;
      const keepDays = keepDaysOf(served);
      const found = conversation?.resume && !restart ? opts.sessions!.get(conversation.id) : null;
      // Kept on disk too, with the CLI's session, when the CLI can resume one: the job outlives a restart of the worker.
      const session = conversation
        ? { id: conversation.id, resume: conversation.resume || restart !== undefined, restarted: restart !== undefined, keep: keepDays > 0, ...((restart?.cliSessionId ?? found?.cliId) ? { cliId: restart?.cliSessionId ?? found?.cliId } : {}) }
        : resumable && runtime?.sessions
          ? { id: restart?.sessionId ?? randomUUID(), resume: restart !== undefined, restarted: restart !== undefined, keep: false, ...(restart?.cliSessionId ? { cliId: restart.cliSessionId } : {}) }
          : undefined;
      const running: RunningJob = {
        runtime: job.runtime,
        abort: new AbortController(),
        permissions: new Map(),
        toolCalls: new Map(),
        link,
        log: resumable ? new JobLog(kept.dir, jobId) : null,
        n: 0,
        ended: false,
        tooLarge: false,
        graceMs,
        graceTimer: null,
        onForget: null,
        steer: null,
        early: [],
      };
      if (session && resumable) {
        if (!restart) kept.records.save({ jobId, job, sessionId: session.id, graceMs });
        running.onForget = () => {
          kept.records.remove(jobId);
          // A conversation's session stays for the next follow-up (its own expiry deletes it).
          if (!session.keep) runtime?.sessions?.forget(session.cliId ?? session.id, policy.allowedEnv);
        };
      }
      // Its events go on from what the service stored.
      if (restart) running.n = restart.after;
      const texts = textBatcher((text) => sendEvent(jobId, running, { type: "text_delta", text }));
      const emit = (event: JobEvent) => {
        if (running.ended || running.tooLarge) return;
        // A failure's text is the machine's (a CLI's stderr, a path that was missing): the app gets it without
        // paths, names or environment values; the whole of it is printed here (the job's last line below).
        if (event.type === "failed") event = { ...event, message: redact(event.message) };
        spans?.event(event);
        if (event.type === "text_delta") return texts.add(event.text);
        // An older service takes no `usage` events (it would count them as bad messages): only the job's end carries its usage then.
        if (event.type === "usage" && !running.link?.features.has(WORKER_FEATURES.jobUsage) && !resumable) return;
        texts.flush();
        // Its slot is free once its end is said: the service may send the next job at once.
        if (event.type === "done" || event.type === "failed") {
          running.ended = true;
          // A resumable job's end is kept until the service acknowledges it (it may come back for it after a lost link).
          if (!running.log) jobs.delete(jobId);
          else keepFor(jobId, running, running.graceMs);
          // Before the end: the service still holds the job's span then.
          if (spans) running.link?.send(workerMessage("job_spans", { jobId, sentAt: Date.now(), spans: spans.records(event) }));
        }
        sendEvent(jobId, running, event);
      };
      if (!runtime) return emit({ type: "failed", code: "unknown_runtime", message: `This machine does not serve ${job.runtime}.` });
      // A follow-up's session that is not here (forgotten by the user, expired, kept in another working folder): said, never started afresh.
      if (conversation?.resume && !restart && (!found || found.runtime !== job.runtime || (runtime.workdir && found.workdir !== runtime.workdir))) {
        const why = !found ? "it was forgotten here (svc-worker sessions forget, unpair, or sessions.keepDays)" : found.runtime !== job.runtime ? `it is a session of ${found.runtime}` : "it belongs to another working folder than the one served now";
        return emit({ type: "failed", code: "session_not_found", message: `This machine does not hold the ${job.runtime} session of this conversation: ${why}.` });
      }
      const cap = runtime.advert.maxConcurrentJobs ?? Infinity;
      const busy = [...jobs.values()].filter((j) => j.runtime === runtime.advert.name && !j.ended).length;
      if (busy >= cap) {
        print(`✗ ${jobId} refused: ${job.runtime} already runs ${busy} job(s), its cap (maxConcurrentJobs)`);
        return emit({ type: "failed", code: "at_capacity", message: `${job.runtime} on this machine already runs ${busy} job(s), its cap (maxConcurrentJobs ${cap}).` });
      }
      // A cancelled job answers what still waits, so nothing hangs on a link that is gone.
      running.abort.signal.addEventListener("abort", () => {
        for (const answer of [...running.toolCalls.values()]) answer({ output: "The run was cancelled.", isError: true });
        for (const answer of [...running.permissions.values()]) answer({ allow: false, message: "The run was cancelled." });
      });
      jobs.set(jobId, running);
      if (traceparent && policy.policy.telemetry?.traces && features.has(WORKER_FEATURES.jobSpans)) spans = new JobSpans(job, runtime.advert.name);
      const what = job.kind === "model_turn" ? `${job.runtime} ${job.model}` : job.runtime;
      print(`→ ${jobId} ${job.kind} on ${what}`);
      if (restart) emit({ type: "session_resumed", reason: `The worker on the user's machine restarted while ${job.runtime} worked; it resumed its saved session.` });
      let last: JobEvent | null = null;
      // The session in use: its entry is refreshed now (so no expiry takes it mid-run) and again at the end.
      const remember = () => {
        if (!conversation || !session) return;
        if (session.keep) opts.sessions!.keep({ id: session.id, runtime: job.runtime, ...(session.cliId ? { cliId: session.cliId } : {}), workdir: runtime.workdir ?? "" });
        else opts.sessions!.remove(session.id);
      };
      remember();
      try {
        await runtime.run(job, {
          onUserMessage: (listener) => {
            running.steer = listener;
            for (const text of running.early.splice(0)) listener(text);
          },
          ...(session
            ? {
                session,
                // The CLI named its session itself (Codex's thread): kept with the job for a resume after a restart.
                sessionSaved: (cliId: string) => {
                  session.cliId = cliId;
                  if (jobs.get(jobId) === running && resumable) kept.records.save({ jobId, job, sessionId: session.id, cliSessionId: cliId, graceMs });
                  remember();
                },
              }
            : {}),
          emit: (e) => ((last = e), emit(e)),
          signal: running.abort.signal,
          askPermission: (request) => {
            let askedApp = false;
            spans?.permission(request.requestId, request.tool);
            const gated = policy.gate(
              (req) =>
                new Promise((answer) => {
                  askedApp = true;
                  running.permissions.set(req.requestId, (a) => (running.permissions.delete(req.requestId), answer(a)));
                  emit({ type: "permission_request", ...req });
                }),
            );
            return gated(request).then((a) => (spans?.permissionAnswered(request.requestId, a.allow, askedApp ? "app" : "machine"), a));
          },
          withdrawPermission: (requestId) => {
            const answer = running.permissions.get(requestId);
            if (!answer) return;
            answer({ allow: false, message: "Withdrawn by the agent." });
            emit({ type: "permission_withdrawn", requestId });
          },
          callTool: (call) =>
            new Promise((answer) => {
              if (running.abort.signal.aborted) return answer({ output: "The run was cancelled.", isError: true });
              spans?.toolCall(call.id, call.name);
              running.toolCalls.set(call.id, (a) => (running.toolCalls.delete(call.id), spans?.toolAnswered(call.id, a.isError), answer(a)));
              emit({ type: "tool_call", ...call });
            }),
          reportWindows: (reported) => {
            let book = windows.get(runtime.advert.name);
            if (!book) windows.set(runtime.advert.name, (book = new WindowBook()));
            // Told only when something changed: a CLI repeating itself sends nothing.
            if (book.merge(reported)) running.link?.windowsChanged(runtime.advert.name);
          },
          launch: policy.launch,
          commandOutput: policy.policy.commandOutput,
          allowedEnv: policy.allowedEnv,
          sandbox: policy.sandbox,
        });
      } catch (err) {
        last = { type: "failed", code: "runtime_error", message: (err as Error).message };
        emit(last);
      } finally {
        running.steer = null;
        if (!running.ended) emit({ type: "failed", code: "runtime_error", message: `${job.runtime} ended the job without a result.` });
        if (jobs.get(jobId) === running && !running.log) jobs.delete(jobId);
        // A conversation's session is kept for its follow-ups (sessions.keepDays 0: deleted now); one the CLI did not find is no longer listed.
        const end = last as JobEvent | null;
        if (session && conversation) {
          if (end?.type === "failed" && end.code === "session_not_found") opts.sessions!.remove(session.id);
          else remember();
          if (!session.keep) runtime.sessions?.forget(session.cliId ?? session.id, policy.allowedEnv);
        }
      }
      const end = last as JobEvent | null;
      if (end?.type === "done") print(`✓ ${jobId} done (${end.usage.inputTokens} in, ${end.usage.outputTokens} out)`);
      else if (end?.type === "failed") print(`✗ ${jobId} failed: ${end.code}: ${end.message}`);
    }
  });
}

/**
 * A job's text deltas on their way out: one after a quiet spell goes at once; those
 * that come within `TEXT_WINDOW_MS` of the last send wait for the rest of that window
 * (not a whole window from their arrival) and go together, in pieces of at most
 * `TEXT_PIECE_CHARS`. A model streaming a piece every window, jitter included, has
 * each piece sent on its own, delayed by that jitter at most. `flush` sends what
 * waits (before any other event of the job).
 */
export function textBatcher(sendText: (text: string) => void, now: () => number = () => performance.now()): { add(text: string): void; flush(): void } {
  let text = "";
  let timer: NodeJS.Timeout | null = null;
  let sentAt = -Infinity;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (!text) return;
    sentAt = now();
    for (let i = 0; i < text.length; i += TEXT_PIECE_CHARS) sendText(text.slice(i, i + TEXT_PIECE_CHARS));
    text = "";
  };
  const add = (piece: string) => {
    text += piece;
    if (timer && text.length < TEXT_PIECE_CHARS) return;
    const since = now() - sentAt;
    if (text.length >= TEXT_PIECE_CHARS || since >= TEXT_WINDOW_MS) flush();
    else timer = setTimeout(flush, TEXT_WINDOW_MS - since);
  };
  return { add, flush };
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

let toldUpdate = false;

/** The line an older worker prints when the service tells it where the current one is (`welcome`'s `update`). */
export function updateLine(update: { version: string; packageUrl: string; scriptUrl: string }): string {
  const how = RUNS_FROM === "single-file" ? `download ${update.scriptUrl} and run it with node` : `run it with npx --yes ${update.packageUrl} start`;
  return `! ${CLIENT_NAME} ${update.version} is available (this is ${CLIENT_VERSION}): ${how}. This one is still served.`;
}
