import { expect } from "vitest";
import { withClient, type TestDatabase } from "./databases.js";
import { pollUntil, startServerProcess, tempDir, type ServerProcess } from "./process.js";
import { sseFrames, type SseFrame } from "./sse.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "./worker.js";

/**
 * Runs across several real server processes sharing one Postgres, as an app behind a load balancer
 * sees them (`test/runs/runs-instances.test.ts`, `test/bus/run-bus.test.ts`): instances, a worker
 * process, runs started and streamed over raw HTTP, answers, and what the database holds at the end.
 */

export type Keys = { appKey: string; connectKey: string };
export type Target = { url: string; fetch(p: string, init?: RequestInit): Promise<Response> };

export const workers: WorkerProcess[] = [];

export const tagged = () => `#${Math.random().toString(36).slice(2, 10)}`;

/**
 * Kills the workers, then waits until their instance has marked the machine
 * offline: an instance stopped while that write is still in flight does not exit
 * (seen: "could not mark a machine offline: Unknown transaction status", then a
 * hang until SIGKILL), which would cost every test 20 s.
 */
export async function stopWorkers(databaseUrl: string | undefined, machineId: string | undefined): Promise<void> {
  const stopping = workers.splice(0);
  for (const w of stopping) w.stop();
  await Promise.all(stopping.map((w) => w.exited));
  if (!databaseUrl || !machineId) return;
  const connected = () => withClient(databaseUrl, async (c) => (await c.query<{ i: string | null }>("SELECT connected_instance AS i FROM machines WHERE id = $1", [machineId])).rows[0]?.i ?? null);
  await pollUntil(connected, (i) => i === null, 10_000, "the machine marked offline").catch(() => {});
  await new Promise((r) => setTimeout(r, 200));
}

export function startWorker(home: string): WorkerProcess {
  const w = spawnWorker(["start"], home);
  workers.push(w);
  return w;
}

/** A server process on its database; with `port`, its real address is that port (PUBLIC_URL may name the balancer). */
export async function instance(databaseUrl: string, env: Record<string, string> = {}, port?: number): Promise<ServerProcess> {
  // SVC_DEV_APP=1: the first instance on the fresh Postgres prints the dev app the tests use.
  const s = await startServerProcess(tempDir("svc-inst-"), { DATABASE_URL: databaseUrl, SVC_DEV_APP: "1", ...(port ? { PORT: String(port) } : {}), ...env });
  if (port) s.url = `http://127.0.0.1:${port}`;
  return s;
}

export const headers = (keys: Keys) => ({ authorization: `Bearer ${keys.appKey}`, "content-type": "application/json" });

export async function post(on: Target, keys: Keys, path: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await on.fetch(path, { method: "POST", headers: headers(keys), body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

export async function getRun(on: Target, keys: Keys, runId: string): Promise<Record<string, unknown>> {
  const res = await on.fetch(`/v1/runs/${runId}`, { headers: headers(keys) });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

/** One attached stream: its frames as they come, read in the background. */
export interface Reader {
  runId: string;
  frames: SseFrame[];
  /** Settles when the stream ended: its final event, a drop, or the instance dying. */
  ended: Promise<void>;
  /** What broke the stream, when it did not end with a final event. */
  broken: unknown;
  /** Hangs up (the run goes on). */
  drop(): Promise<void>;
}

export type OnFrame = (f: SseFrame, runId: string) => void;

export function readStream(res: Response, ac: AbortController, runId: string, onFrame: OnFrame): Reader {
  const reader: Reader = {
    runId,
    frames: [],
    broken: null,
    ended: Promise.resolve(),
    drop: async () => {
      ac.abort();
      await reader.ended;
    },
  };
  reader.ended = (async () => {
    try {
      for await (const f of sseFrames(res)) {
        reader.frames.push(f);
        onFrame(f, runId);
      }
    } catch (err) {
      reader.broken = err;
    }
  })();
  return reader;
}

export async function startRun(on: Target, keys: Keys, body: Record<string, unknown>, onFrame: OnFrame = () => {}): Promise<Reader> {
  const ac = new AbortController();
  const res = await on.fetch("/v1/runs", { method: "POST", headers: headers(keys), body: JSON.stringify(body), signal: ac.signal });
  if (res.status !== 200) throw new Error(`POST /v1/runs answered ${res.status}: ${await res.text()}`);
  const runId = res.headers.get("service-run-id")!;
  expect(runId).toMatch(/^run_/);
  return readStream(res, ac, runId, onFrame);
}

export async function reattach(on: Target, keys: Keys, runId: string, lastEventId: string, onFrame: OnFrame = () => {}): Promise<Reader> {
  const ac = new AbortController();
  const res = await on.fetch(`/v1/runs/${runId}/events`, { headers: { ...headers(keys), "last-event-id": lastEventId }, signal: ac.signal });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  return readStream(res, ac, runId, onFrame);
}

/** Answers every tool call and approval a stream shows, on the instance `on()` names at that moment. */
export function answerer(keys: Keys, on: () => Target) {
  const answers: Promise<{ status: number; body: Record<string, unknown> }>[] = [];
  const onFrame: OnFrame = (f, runId) => {
    if (f.event === "tool_call") answers.push(post(on(), keys, `/v1/runs/${runId}/tool_result`, { callId: f.data.callId, result: { tool: f.data.name, temp: 21 } }));
    if (f.event === "approval_request") answers.push(post(on(), keys, `/v1/runs/${runId}/approval`, { approvalId: f.data.approvalId, decision: "allow" }));
  };
  return {
    onFrame,
    answers,
    /** Every answer posted was taken (200). */
    async allTaken(): Promise<void> {
      for (const a of await Promise.all(answers)) expect(a.status, JSON.stringify(a.body)).toBe(200);
    },
  };
}

export const waitFrames = (r: Reader, ok: (frames: SseFrame[]) => boolean, timeoutMs = 20_000, what = "frames") =>
  pollUntil(async () => r.frames, ok, timeoutMs, what).catch((err: Error) => {
    throw new Error(`${err.message.slice(0, 200)}\nseen: ${r.frames.map((f) => `${f.id}:${f.event}`).join(" ")}\nbroken: ${String(r.broken)}`);
  });

/** What the stand-in model answered last: the last tool result, as JSON. */
export function toolSaid(output: unknown): unknown {
  expect(output).toMatch(/^The tool said: \{/);
  return JSON.parse(String(output).slice("The tool said: ".length));
}

export const count = (frames: SseFrame[], kind: string) => frames.filter((f) => f.event === kind).length;

/** The union of what the app saw: every seq from 1 to the last exactly once, in order, ending with the run's end. */
export function expectWhole(frames: SseFrame[], final = "run_completed"): void {
  const seqs = frames.map((f) => Number(f.id));
  expect(seqs, frames.map((f) => `${f.id}:${f.event}`).join(" ")).toEqual(seqs.map((_, i) => i + 1));
  expect(frames.at(-1)!.event).toBe(final);
  for (const f of frames) expect(f.data.kind).toBe(f.event);
}


export const claimedBy = (s: ServerProcess, runId: string) => s.logs().filter((l) => l.msg === "run claimed" && l.runId === runId);

/** The database's word on a finished run: its events 1..N, its ledger rows (one `run`, one `tokens` per turn), its totals. */
export async function expectStored(databaseUrl: string, runId: string, lastSeq: number, turns: number): Promise<void> {
  // On the run bus a finished run's events are moved into Postgres moments after its end.
  await compacted(databaseUrl, runId);
  await withClient(databaseUrl, async (c) => {
    const events = await c.query<{ seq: number; kind: string }>("SELECT seq, kind FROM run_events WHERE run_id = $1 ORDER BY seq", [runId]);
    expect(events.rows.map((e) => e.seq)).toEqual(Array.from({ length: lastSeq }, (_, i) => i + 1));
    expect(events.rows.filter((e) => ["run_completed", "run_failed", "run_cancelled"].includes(e.kind))).toHaveLength(1);
    const usage = await c.query<{ kind: string; unique_key: string; input_tokens: string; output_tokens: string }>(
      "SELECT kind, unique_key, input_tokens::text, output_tokens::text FROM usage_rows WHERE run_id = $1 ORDER BY kind, unique_key",
      [runId],
    );
    expect(usage.rows.map((u) => `${u.kind} ${u.unique_key}`)).toEqual([`run run:${runId}`, ...Array.from({ length: turns }, (_, i) => `tokens tokens:${runId}:${i + 1}`)]);
    const tokens = usage.rows.filter((u) => u.kind === "tokens");
    // The stand-in reports 12 in, 7 out per turn: the run's totals are each turn once.
    for (const t of tokens) expect([t.input_tokens, t.output_tokens]).toEqual(["12", "7"]);
    const [run] = (await c.query<{ status: string; turns: number; input_tokens: string; output_tokens: string; last_seq: number }>(
      "SELECT status, turns, input_tokens::text, output_tokens::text, last_seq FROM runs WHERE id = $1",
      [runId],
    )).rows;
    expect(run).toMatchObject({ status: "completed", turns, input_tokens: String(12 * turns), output_tokens: String(7 * turns), last_seq: lastSeq });
  });
}

/** Waits until a finished run's events are in Postgres (`run_events`), not on the run bus. */
export async function compacted(databaseUrl: string, runId: string): Promise<void> {
  const inStream = () => withClient(databaseUrl, async (c) => (await c.query<{ s: boolean }>("SELECT events_in_stream AS s FROM runs WHERE id = $1", [runId])).rows[0]?.s);
  await pollUntil(inStream, (s) => s === false, 20_000, `run ${runId}'s events compacted into Postgres`);
}

/** `svc-worker start` for a paired machine, once its instance (`on`) has it online. */
export async function connectWorker(on: ServerProcess, home: string, machineId: string, name = "the instance"): Promise<WorkerProcess> {
  const worker = startWorker(home);
  await worker.waitFor(/Connected/);
  await pollUntil(async () => on.logs().some((l) => l.msg === "worker online" && l.machineId === machineId), (ok) => ok, 10_000, `the worker online on ${name}`);
  return worker;
}

/** Three instances on one fresh Postgres (and the run bus, with `nats`), a worker paired and connected through one of them. */
export interface ThreeInstances {
  a: ServerProcess;
  b: ServerProcess;
  c: ServerProcess;
  keys: Keys;
  databaseUrl: string;
  worker: WorkerProcess;
  machineId: string;
  stop(): Promise<void>;
}

/**
 * Starts A, B and C on a copy of the migrated template (nothing to migrate), A
 * first (it prints the dev app's keys), then B and C at once; pairs `user`'s
 * machine with `settings` through the instance `holder` names and connects its
 * worker there. `stop` undoes it all, the worker first (see stopWorkers).
 */
export async function threeInstances(
  postgres: TestDatabase,
  opts: { env?: Record<string, string>; user: string; settings: Record<string, unknown>; holder: "a" | "b" },
): Promise<ThreeInstances> {
  const made = await postgres.create({ migrated: true });
  const databaseUrl = (made.target as { url: string }).url;
  const started: ServerProcess[] = [];
  let machineId: string | undefined;
  const stop = async () => {
    await stopWorkers(databaseUrl, machineId);
    await Promise.all(started.map((s) => s.stop()));
    await made.drop();
  };
  try {
    const a = await instance(databaseUrl, opts.env);
    started.push(a);
    const keys = a.banner()!;
    expect(keys?.appKey).toMatch(/^sk_/);
    const [b, c] = await Promise.all([instance(databaseUrl, opts.env), instance(databaseUrl, opts.env)]);
    started.push(b, c);
    const holder = opts.holder === "a" ? a : b;
    // Paired through the holder: its credentials name it, so the worker's connection is held there.
    const m = await pairViaApi(holder, keys, opts.user, opts.settings);
    machineId = m.machineId;
    const worker = await connectWorker(holder, m.home, m.machineId, opts.holder.toUpperCase());
    return { a, b, c, keys, databaseUrl, worker, machineId: m.machineId, stop };
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}
