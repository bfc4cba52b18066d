import net from "node:net";
import v8 from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { sseFrames, type SseFrame } from "../helpers/sse.js";
import { ensureEndUser } from "../../server/users/end-users.js";
import { randomId } from "../../server/crypto.js";
import type { StoredEvent } from "../../server/runs/run-rows.js";
import { SLOW_READER_COMMENT } from "../../server/runs/sse.js";
import { STREAM_BUFFER_CAP_BYTES } from "../../server/runs/follow-run.js";

/**
 * Readers of a run's stream that do not keep up. The server runs in this
 * process, so its memory is measured here (after a full GC). A large run is
 * written the way a run's driver writes it (`RunStore.write` under the run's
 * lease, then `RunBus.publish`): its size is the test's choice, not bounded by
 * the limits a machine's run has. A small run goes through a real worker.
 */

// Garbage collection on demand, for honest memory figures.
v8.setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** Events of the large run and the size of each delta's text. */
const DELTA_BYTES = 1_000;
/** The large run stops growing here (30 MB) should the readers never be closed. */
const MAX_DELTAS = 30_000;
const SLOW_READERS = 50;

function memory() {
  gc();
  gc();
  const m = process.memoryUsage();
  return { rss: m.rss, heap: m.heapUsed + m.external };
}
const mb = (n: number) => Math.round((n / 1024 / 1024) * 10) / 10;

/**
 * A raw HTTP/1.1 reader on its own socket: it reads the answer's head and then
 * stops reading (the socket paused: the kernel's buffers fill, then the server's
 * socket pushes back). `resume()` reads the rest until the server ends it.
 */
class RawReader {
  readonly socket: net.Socket;
  private raw = Buffer.alloc(0);
  private readonly rest: Buffer[] = [];
  private headEnd = -1;
  readonly head: Promise<string>;
  private ended: Promise<void>;

  constructor(url: string, path: string, headers: Record<string, string>) {
    const { hostname, port } = new URL(url);
    this.socket = net.connect(Number(port), hostname);
    const lines = [`GET ${path} HTTP/1.1`, `Host: ${hostname}:${port}`, "Connection: close", ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), "", ""];
    this.socket.write(lines.join("\r\n"));
    this.head = new Promise((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        this.raw = Buffer.concat([this.raw, chunk]);
        this.headEnd = this.raw.indexOf("\r\n\r\n");
        if (this.headEnd >= 0) {
          this.socket.pause();
          this.socket.off("data", onData);
          resolve(this.raw.subarray(0, this.headEnd).toString());
        }
      };
      this.socket.on("data", onData);
      this.socket.once("error", reject);
    });
    this.ended = new Promise((resolve) => this.socket.once("close", () => resolve()));
  }

  /** Reads everything until the server closes; the body, de-chunked. */
  async resume(timeoutMs = 60_000): Promise<string> {
    this.socket.on("data", (chunk: Buffer) => this.rest.push(chunk));
    this.socket.resume();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.ended, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("the stream did not end")), timeoutMs)))]);
    clearTimeout(timer);
    const body = dechunk(Buffer.concat([this.raw.subarray(this.headEnd + 4), ...this.rest]));
    this.rest.length = 0;
    return body;
  }

  destroy() {
    this.socket.destroy();
  }
}

/** A chunked body's bytes (up to where it stops, complete or not). */
function dechunk(body: Buffer): string {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = body.indexOf("\r\n", at);
    if (eol < 0) break;
    const size = parseInt(body.subarray(at, eol).toString(), 16);
    if (!Number.isFinite(size) || size === 0) break;
    parts.push(body.subarray(eol + 2, Math.min(eol + 2 + size, body.length)));
    at = eol + 2 + size + 2;
    if (at > body.length) break;
  }
  return Buffer.concat(parts).toString();
}

/** The `id:`s of the complete frames of an event-stream text, in order. */
function frameIds(text: string): number[] {
  return text
    .split("\n\n")
    .map((f) => /^id: (\d+)$/m.exec(f)?.[1])
    .filter((id): id is string => id !== undefined)
    .map(Number);
}

const consecutive = (ids: number[], from: number) => ids.every((id, i) => id === from + i);

onEachDatabase("slow readers of a run's stream on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let svc: Svc;
  let worker: WorkerProcess;
  const auth = () => ({ authorization: `Bearer ${server.dev.appKey}` });

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    model = await startModelStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    worker = await startModelMachine(server, server.dev, "alice", model.url);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  /** Reads a stream to its end (or `timeoutMs`): its frames. */
  async function readAll(path: string, headers: Record<string, string> = {}, timeoutMs = 15_000): Promise<SseFrame[]> {
    const res = await server.fetch(path, { headers: { ...auth(), ...headers }, signal: AbortSignal.timeout(timeoutMs) });
    expect(res.status).toBe(200);
    const frames: SseFrame[] = [];
    for await (const f of sseFrames(res)) frames.push(f);
    return frames;
  }

  /** A run leased to this instance, with its `run_started` stored, which the test drives as a run's driver does (`write`: stored, then published). */
  async function leasedRun(user: string, prompt: string) {
    const { runStore, runBus } = server.services;
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    const endUserId = await ensureEndUser(server.db, tenant, user);
    const runId = randomId("run_", 24);
    await server.db.prisma.run.create({
      data: { id: runId, ...tenant, endUserId, source: "runs", model: "stand-in", request: { prompt }, status: "running", leaseOwner: runStore.instance, leaseExpiresAt: new Date(server.clock.now().getTime() + 3_600_000) },
    });
    let seq = 0;
    const write = async (events: Omit<StoredEvent, "seq">[], patch?: Parameters<typeof runStore.write>[3]["patch"]) => {
      const stored = events.map((e) => ({ ...e, seq: ++seq }));
      expect(await runStore.write(runId, endUserId, server.clock.now(), { events: stored, patch })).toBe(true);
      runBus.publish(runId, stored);
    };
    await write([{ kind: "run_started", data: { kind: "run_started", runId, route: "user-hardware", costClass: "user_hardware", machineId: null, runtime: "stand-in", model: "stand-in" } }]);
    return { runId, endUserId, write, lastSeq: () => seq };
  }

  it("re-attaching at or past the end of a finished run answers its final event again and closes at once; the SDK takes it as the run's end", async () => {
    const run = svc.runs.create({ user: "alice", prompt: "Hello" });
    const seen: RunEvent[] = [];
    for await (const e of run) seen.push(e);
    const result = await run.result();
    expect(result.status).toBe("completed");
    const runId = await run.runId;
    const last = run.lastEventId!;
    expect(last).toBe(seen.length);

    // At the end, past it (header and query): the final event once more, its id the stored one, then the stream closes.
    const started = Date.now();
    for (const [path, headers] of [
      [`/v1/runs/${runId}/events`, { "last-event-id": String(last) }],
      [`/v1/runs/${runId}/events`, { "last-event-id": String(last + 7) }],
      [`/v1/runs/${runId}/events?after=${last}`, {}],
      [`/v1/runs/${runId}/events?after=${last + 1000}`, {}],
    ] as const) {
      const frames = await readAll(path, headers, 10_000);
      expect(frames.map((f) => [f.id, f.event, f.data.output])).toEqual([[String(last), "run_completed", result.output]]);
    }
    // Promptly: four answers well inside one keep-alive period (the old stream stayed open for ever).
    expect(Date.now() - started).toBeLessThan(10_000);
    // A position no run can reach (past the 32-bit sequence) is refused, not a stream that can never end.
    const far = await server.fetch(`/v1/runs/${runId}/events?after=3000000000`, { headers: { authorization: `Bearer ${server.dev.appKey}` } });
    expect(far.status).toBe(400);
    expect((await far.json()).error).toMatchObject({ code: "invalid_request", param: "after" });
    // Just before the end: the final event, as any re-attach.
    expect((await readAll(`/v1/runs/${runId}/events`, { "last-event-id": String(last - 1) })).map((f) => f.id)).toEqual([String(last)]);

    // The SDK re-attached past the end: no event to iterate, and the run's result.
    for (const after of [last, last + 3]) {
      const again = svc.runs.events(runId, { after });
      const events: RunEvent[] = [];
      for await (const e of again) events.push(e);
      expect(events).toEqual([]);
      expect(await again.result()).toMatchObject({ runId, status: "completed", output: result.output, usage: result.usage, route: "user-hardware", runtime: "ollama" });
    }
  });

  it("a stream with nothing to send yet has its head at once; what comes after reaches it, and its end ends it", async () => {
    const { runId, write } = await leasedRun("carol", "wait");
    // Re-attached after the one event there is: no frame to write, the head goes out on its own, at once.
    const reader = new RawReader(server.url, `/v1/runs/${runId}/events`, { ...auth(), "last-event-id": "1" });
    const head = await Promise.race([reader.head, new Promise<string>((_, reject) => setTimeout(() => reject(new Error("no head within 3 s")), 3_000))]);
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    expect(head.toLowerCase()).toContain("content-type: text/event-stream");
    // Then the run goes on: its frames reach the reader, in order, and its end closes the stream.
    await write([{ kind: "text_delta", data: { kind: "text_delta", turn: 1, text: "late" } }]);
    await write([{ kind: "run_completed", data: { kind: "run_completed", output: "late", stopReason: "end_turn", usage: { inputTokens: 1, outputTokens: 1, costClass: "user_hardware", amountMicros: 0 } } }], { status: "completed", finished: true, output: "late", stopReason: "end_turn" });
    const body = await reader.resume(15_000);
    expect(frameIds(body)).toEqual([2, 3]);
    expect(body).toContain('"text":"late"');
  });

  it(`${SLOW_READERS} readers that never read a large run: memory stays bounded, each is closed as slow with a reason and re-attaches losing nothing; a reader beside them gets everything; catch-up waits for the socket`, async () => {
    // A run leased to this instance, which the test drives as a run's driver does.
    const { runId, write, lastSeq } = await leasedRun("bob", "a long answer");

    const before = memory();

    // A reader that reads, beside them: it checks order and gaps as it goes (keeping nothing). Should a loaded
    // machine make it fall behind by the cap too, it re-attaches as any client would.
    let normalReattached = 0;
    const normal = (async () => {
      let next = 1;
      let bytes = 0;
      for (let final = false; !final; ) {
        const res = await server.fetch(`/v1/runs/${runId}/events`, { headers: { ...auth(), ...(next > 1 ? { "last-event-id": String(next - 1) } : {}) } });
        for await (const f of sseFrames(res)) {
          expect(Number(f.id)).toBe(next++);
          if (f.event === "text_delta") bytes += String(f.data.text).length;
          final = f.event === "run_completed";
        }
        if (!final) normalReattached++;
      }
      return { count: next - 1, bytes };
    })();
    normal.catch(() => {}); // awaited below

    // Readers that never read: each takes its answer's head, then stops reading.
    const slow = Array.from({ length: SLOW_READERS }, () => new RawReader(server.url, `/v1/runs/${runId}/events`, auth()));
    for (const r of slow) expect(await r.head).toMatch(/^HTTP\/1\.1 200 /);

    // The run's body: many deltas, written as a driver flushes them (50 a statement), then its end.
    let peak = { rss: 0, heap: 0 };
    const sample = setInterval(() => {
      const m = process.memoryUsage();
      peak = { rss: Math.max(peak.rss, m.rss), heap: Math.max(peak.heap, m.heapUsed + m.external) };
    }, 50);
    // Until every slow reader was closed (past what the kernel's socket buffers take, some 4 MB each on loopback,
    // and the 1 MiB cap), then 1 MB more: the run outgrows what any of them took.
    const text = "x".repeat(DELTA_BYTES - 10);
    const closedSlow = () => server.logs.filter((l) => l.includes("closed a slow reader")).length;
    let deltas = 0;
    let closedAt = 0;
    while (deltas < MAX_DELTAS && (closedAt === 0 || deltas < closedAt + 1_000)) {
      await write(Array.from({ length: 50 }, (_, j) => ({ kind: "text_delta", data: { kind: "text_delta", turn: 1, text: `${String(deltas + j).padStart(9, "0")} ${text}` } })));
      deltas += 50;
      // A driver writes as a machine's frames arrive: sockets get their turn between writes (PGlite answers without one).
      await new Promise((r) => setImmediate(r));
      if (closedAt === 0 && closedSlow() >= SLOW_READERS + normalReattached) closedAt = deltas;
    }
    expect(closedAt).toBeGreaterThan(0);
    // A reader ahead of the live run (an id it never sent): it waits, then gets the run's end as it comes, and closes.
    const ahead = server.fetch(`/v1/runs/${runId}/events`, { headers: { ...auth(), "last-event-id": String(lastSeq() + 10) }, signal: AbortSignal.timeout(30_000) }).then((r) => r.text());
    await new Promise((r) => setTimeout(r, 200));
    const finalData = { kind: "run_completed" as const, output: "(long)", usage: { inputTokens: 1, outputTokens: deltas, costClass: "user_hardware" as const, amountMicros: 0 }, stopReason: "stop" };
    await write([{ kind: "run_completed", data: finalData }], { status: "completed", output: "(long)", finished: true });
    const total = lastSeq();
    expect(frameIds(await ahead)).toEqual([total]);
    expect(await normal).toEqual({ count: total, bytes: deltas * DELTA_BYTES });

    // Every slow reader was closed as slow (the server says so in its log), and memory stayed bounded meanwhile.
    expect(closedSlow()).toBe(SLOW_READERS + normalReattached);
    clearInterval(sample);
    const after = memory();
    const live = { peakRss: mb(peak.rss - before.rss), peakHeap: mb(peak.heap - before.heap), afterRss: mb(after.rss - before.rss), afterHeap: mb(after.heap - before.heap) };
    console.log(`[${db.name}] ${SLOW_READERS} live readers that never read a ${mb(deltas * DELTA_BYTES)} MB run (all closed by ${mb(closedAt * DELTA_BYTES)} MB; the reading one re-attached ${normalReattached} times): growth over ${mb(before.rss)} MB rss / ${mb(before.heap)} MB heap+external: peak ${live.peakRss} MB rss, ${live.peakHeap} MB heap+external; after closing them ${live.afterRss} MB rss, ${live.afterHeap} MB heap+external`);
    // Without backpressure each held all it was sent (a 9.5 MB run: +445 MB); the cap holds each at about 1 MiB (50 MiB),
    // besides the embedded database's own growth and garbage not yet collected at the peak.
    expect(live.peakHeap).toBeLessThan(mb(SLOW_READERS * STREAM_BUFFER_CAP_BYTES + 150 * 1024 * 1024));
    expect(live.afterHeap).toBeLessThan(60);

    // Each, read now: the events it was sent, in order from the first, then the reason, then the end; a re-attach
    // with Last-Event-ID gets every remaining event once, no gap, up to the final event, and closes.
    const reasons = new Set<string>();
    // As an EventSource would: a connection reset before the answer (a pooled keep-alive socket the
    // server closed as it was reused, which a loaded machine makes likely) is tried again, same Last-Event-ID.
    const reattach = async (lastId: number): Promise<string> => {
      for (let attempt = 1; ; attempt++) {
        try {
          const res = await server.fetch(`/v1/runs/${runId}/events`, { headers: { ...auth(), "last-event-id": String(lastId) }, signal: AbortSignal.timeout(120_000) });
          return await res.text();
        } catch (err) {
          if (attempt === 3 || !/ECONNRESET|other side closed/.test(String((err as Error & { cause?: unknown }).cause ?? err))) throw err;
        }
      }
    };
    await Promise.all(
      slow.map(async (r) => {
        const body = await r.resume();
        const ids = frameIds(body);
        expect(ids.length).toBeGreaterThan(0);
        expect(ids.length).toBeLessThan(total);
        expect(consecutive(ids, 1)).toBe(true);
        expect(body.endsWith(SLOW_READER_COMMENT)).toBe(true);
        reasons.add(body.slice(body.lastIndexOf("\n\n", body.length - 3) + 2));
        const rest = await reattach(ids.at(-1)!);
        const restIds = frameIds(rest);
        expect(restIds[0]).toBe(ids.at(-1)! + 1);
        expect(consecutive(restIds, ids.at(-1)! + 1)).toBe(true);
        expect(restIds.at(-1)).toBe(total);
        const end = new RegExp(`id: ${total}\nevent: run_completed\ndata: (.*)\n\n$`).exec(rest);
        expect(JSON.parse(end![1])).toEqual(finalData);
      }),
    );
    expect([...reasons]).toEqual([SLOW_READER_COMMENT]);

    // The same run, finished and stored: 50 more readers that never read catch up only as their sockets take it.
    const base = memory();
    const stalled = Array.from({ length: SLOW_READERS }, () => new RawReader(server.url, `/v1/runs/${runId}/events`, auth()));
    for (const r of stalled) expect(await r.head).toMatch(/^HTTP\/1\.1 200 /);
    await new Promise((r) => setTimeout(r, 3_000));
    const held = memory();
    console.log(`[${db.name}] ${SLOW_READERS} catching-up readers that never read the stored ${mb(deltas * DELTA_BYTES)} MB run: ${mb(held.rss - base.rss)} MB rss, ${mb(held.heap - base.heap)} MB heap+external`);
    expect(mb(held.heap - base.heap)).toBeLessThan(30);
    // They were not closed (catching up holds nothing): read now, each gets the whole run, once, in order (five of
    // them: the others leave, which ends their reading).
    for (const r of stalled.slice(5)) r.destroy();
    await Promise.all(
      stalled.slice(0, 5).map(async (r) => {
        const ids = frameIds(await r.resume());
        expect(ids.length).toBe(total);
        expect(consecutive(ids, 1)).toBe(true);
      }),
    );
  }, 240_000);
});
