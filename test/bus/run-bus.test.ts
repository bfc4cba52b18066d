import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { onPostgres, withClient } from "../helpers/databases.js";
import { pollUntil, removeTempDirs, runServerToExit, stopAll, tempDir, type ServerProcess } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { freePort } from "../helpers/balancer.js";
import { startNats, type Nats } from "../helpers/nats.js";
import { answerer, count, expectStored, expectWhole, instance, reattach, startRun, tagged, threeInstances, waitFrames, workers, type Keys, type Reader, type ThreeInstances } from "../helpers/instances.js";

/**
 * The run bus (NATS JetStream, `NATS_URL`) with real server processes on one Postgres, a
 * real worker and a NATS server of the test's own: a run's live events reach only the
 * instances reading it; NATS stopped for 5 s under load, every run completes, nothing lost
 * or doubled, the outage logged once per instance; NATS stopped, a request reading the bus
 * answers 503 at once; NATS unreachable at start, the instance says so and does not start.
 */

let model: ModelStandIn;

beforeAll(async () => {
  model = await startModelStandIn();
});
afterAll(async () => {
  for (const w of workers) w.stop();
  await stopAll();
  await model?.close();
  removeTempDirs();
});

/** A streamed response's `text/event-stream` as it comes, as text (its last frame, `[DONE]`, is not JSON). */
function responseStream(res: Response): { text: string; ended: Promise<void>; count(type: string): number } {
  const s = {
    text: "",
    ended: Promise.resolve(),
    count: (type: string) => s.text.split(`event: ${type}\n`).length - 1,
  };
  s.ended = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) s.text += decoder.decode(chunk, { stream: true });
  })();
  return s;
}

/** Messages NATS delivered to each instance's connection (named `svc pid <pid>`) so far. */
async function deliveredTo(nats: Nats, ...servers: ServerProcess[]): Promise<number[]> {
  const res = await fetch(`${nats.monitorUrl}/connz?limit=1024`);
  const { connections } = (await res.json()) as { connections: { name?: string; out_msgs: number }[] };
  return servers.map((s) => connections.find((c) => c.name === `svc pid ${s.child.pid}`)?.out_msgs ?? Number.NaN);
}

onPostgres("the NATS run bus (A holds the worker, B reads, C does neither)", (postgres) => {
  let nats: Nats;
  let a: ServerProcess;
  let b: ServerProcess;
  let c: ServerProcess;
  let keys: Keys;
  let databaseUrl: string;
  let set: ThreeInstances;
  const user = "rider";

  beforeAll(async () => {
    nats = await startNats();
    // A high cap: the 20 runs of the outage test run at once.
    set = await threeInstances(postgres, { env: { NATS_URL: nats.url }, user, holder: "a", settings: { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false }, maxConcurrentJobs: 24 } });
    ({ a, b, c, keys, databaseUrl } = set);
  });
  afterAll(async () => {
    await set?.stop();
    await nats?.stop();
  });

  it("a run driven on A and read on B, answered on C: B receives its events from NATS, C (no reader, no driver) none; the answer wakes A over NATS, no Postgres notification is sent", async () => {
    // Every run notification Postgres sends meanwhile, heard by a LISTEN of the test's own.
    const listener = new pg.Client({ connectionString: databaseUrl });
    listener.on("error", () => {}); // ended by the database's drop should the test fail first
    await listener.connect();
    const notified: string[] = [];
    listener.on("notification", (n) => notified.push(n.channel));
    for (const channel of ["svc_run_event", "svc_run_input", "svc_run_dispatch"]) await listener.query(`LISTEN ${channel}`);
    const [, bBefore, cBefore] = await deliveredTo(nats, a, b, c);
    expect(Number.isNaN(cBefore)).toBe(false);
    const answers = answerer(keys, () => c);
    let calledAt = 0;
    let resumedAt = 0;
    const onA = await startRun(a, keys, { user, prompt: `Weather in Oslo? [slow] ${tagged()}`, tools: [{ name: "weather" }] }, (f, runId) => {
      if (f.event === "tool_call") calledAt = Date.now();
      else if (calledAt && !resumedAt) resumedAt = Date.now();
      answers.onFrame(f, runId);
    });
    await waitFrames(onA, (fs) => fs.some((f) => f.event === "run_started"));
    // B attaches from the start (Last-Event-ID 0): the stored events from the stream, the rest live.
    const onB = await reattach(b, keys, onA.runId, "0");
    await Promise.all([onA.ended, onB.ended]);
    // The answer posted on C woke A at once: a lost wake would have waited for the driver's 10 s poll (RUN_POLL_MS).
    expect(resumedAt - calledAt).toBeLessThan(3_000);
    await answers.allTaken();
    await new Promise((r) => setTimeout(r, 200));
    expect(notified).toEqual([]);
    // Control: the listener hears a notification on those channels when one is sent.
    await withClient(databaseUrl, (cl) => cl.query("SELECT pg_notify('svc_run_input', 'control')"));
    await pollUntil(async () => notified.length, (n) => n === 1, 5_000, "the control notification heard");
    await listener.end();
    expectWhole(onA.frames);
    expect(onB.frames.map((f) => `${f.id}:${f.event}`)).toEqual(onA.frames.map((f) => `${f.id}:${f.event}`));
    const [, bAfter, cAfter] = await deliveredTo(nats, a, b, c);
    // B: the events it read live (at least the second turn's many text deltas), plus its reads' answers.
    expect(bAfter - bBefore).toBeGreaterThanOrEqual(count(onA.frames, "text_delta") / 2);
    // C took the answer (a Postgres write and wake) and read nothing: NATS sent it nothing.
    expect(cAfter - cBefore).toBe(0);
    await expectStored(databaseUrl, onA.runId, onA.frames.length, 2);
  }, 60_000);

  it("NATS stopped for 5 s while 20 runs go on (streamed on B, answered on C): every run completes, every event once, in order, the ledger exact", async () => {
    const answers = answerer(keys, () => c);
    const started = await Promise.all(Array.from({ length: 20 }, () => startRun(a, keys, { user, prompt: `Weather? [slow] ${tagged()}`, tools: [{ name: "weather" }] }, answers.onFrame)));
    // Each run also read on B from the start: those events come over NATS.
    const onB: Reader[] = await Promise.all(started.map(async (r) => (await waitFrames(r, (fs) => fs.length > 0), reattach(b, keys, r.runId, "0"))));
    // Mid-way (the runs have begun streaming), NATS goes away for 5 s, then comes back on the same port and store.
    await waitFrames(started[0], (fs) => fs.some((f) => f.event === "tool_call"));
    const marks = [a, b, c].map((s) => s.logs().length);
    await nats.stop();
    const stoppedAt = Date.now();
    await new Promise((r) => setTimeout(r, 5000));
    await nats.start();
    await Promise.all([...started, ...onB].map((r) => r.ended));
    expect(Date.now() - stoppedAt).toBeGreaterThan(5000);
    await answers.allTaken();
    expect(answers.answers).toHaveLength(20);
    for (const [i, r] of started.entries()) {
      expect(r.broken, r.runId).toBeNull();
      expectWhole(r.frames);
      expect(onB[i].broken, r.runId).toBeNull();
      expect(onB[i].frames.map((f) => `${f.id}:${f.event}`), r.runId).toEqual(r.frames.map((f) => `${f.id}:${f.event}`));
    }
    for (const r of started) await expectStored(databaseUrl, r.runId, r.frames.length, 2);
    // The outage was said once per instance, and its end once: not once per run, nor again for the publishes
    // A sent while NATS was away that timed out after the reconnect (A said it 2 to 4 times before issue 54).
    for (const [i, s] of [a, b, c].entries()) {
      const said = s.logs().slice(marks[i]).filter((l) => String(l.msg).startsWith("NATS")).map((l) => String(l.msg).replace(/:.*/, ""));
      expect(said, `instance ${"abc"[i]}`).toEqual(["NATS unreachable", "NATS reachable again"]);
    }
  }, 120_000);

  it("NATS stopped: a read of the bus (an in-progress response, read on C) answers 503 bus_unavailable at once, 200 while it is up; the outage is logged once per instance, its end once, whatever publishes failed meanwhile", async () => {
    const h = { authorization: `Bearer ${keys.appKey}`, "content-type": "application/json" };
    // A long answer ("[slow]": a piece every 50 ms) streamed on B, driven on A: its steps go to the stream while C reads it.
    const created = await b.fetch("/v1/responses", { method: "POST", headers: h, body: JSON.stringify({ model: "auto", user, input: `Tell me a story [slow] ${tagged()}`, stream: true }) });
    expect(created.status).toBe(200);
    const onB = responseStream(created);
    await pollUntil(async () => onB.count("response.output_text.delta"), (n) => n >= 20, 20_000, "a second of the answer streamed");
    const responseId = /"id":"(resp_[^"]+)"/.exec(onB.text)![1];
    const read = async () => {
      const t = performance.now();
      const res = await c.fetch(`/v1/responses/${responseId}`, { headers: h });
      return { status: res.status, retryAfter: res.headers.get("retry-after"), body: (await res.json()) as { status?: string; error?: { code: string } }, ms: performance.now() - t };
    };
    // Re-attaching to the response's run's events (on the bus): the stream's status, its body left unread.
    const reattach = async () => {
      const t = performance.now();
      const res = await c.fetch(`/v1/runs/run_${responseId.slice("resp_".length)}/events`, { headers: h });
      const code = res.status === 200 ? null : ((await res.json()) as { error?: { code: string } }).error?.code;
      if (res.status === 200) await res.body?.cancel();
      return { status: res.status, code, ms: performance.now() - t };
    };
    expect((await reattach()).status).toBe(200);
    // Control: NATS up, the same request reads the run's events from the stream (its earlier steps are there, not on its row).
    const up = await read();
    expect(up.status, JSON.stringify(up.body)).toBe(200);
    expect(up.body.status).toBe("in_progress");
    const marks = [a, b, c].map((s) => s.logs().length);
    const since = (s: ServerProcess, i: number, msg: string) => s.logs().slice(marks[i]).filter((l) => String(l.msg).startsWith(msg));
    await nats.stop();
    const stoppedAt = Date.now();
    // C knows at once (its link to NATS is cut): a read of the bus is refused then, not after the client's own time-out.
    await pollUntil(async () => since(c, 2, "NATS unreachable").length, (n) => n === 1, 5_000, "C logs the outage");
    const away = await read();
    expect(away.status, JSON.stringify(away.body)).toBe(503);
    expect(away.body.error?.code).toBe("bus_unavailable");
    expect(away.retryAfter).toBe("2");
    // Before issue 54: 5,019 ms (the client's request time-out); after: 8-18 ms, as with NATS up (21-47 ms).
    expect(away.ms, `${Math.round(away.ms)} ms (up: ${Math.round(up.ms)} ms)`).toBeLessThan(1_000);
    const detached = await reattach();
    expect(detached).toMatchObject({ status: 503, code: "bus_unavailable" });
    expect(detached.ms).toBeLessThan(1_000);
    // Away for longer than a publish's time-out (2 s): A's publishes of the run's next steps fail meanwhile.
    await new Promise((r) => setTimeout(r, Math.max(0, 4_000 - (Date.now() - stoppedAt))));
    await nats.start();
    await onB.ended;
    expect(onB.count("response.completed")).toBe(1);
    const done = await read();
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body.status).toBe("completed");
    for (const [i, s] of [a, b, c].entries()) await pollUntil(async () => since(s, i, "NATS reachable again").length, (n) => n >= 1, 10_000, `instance ${"abc"[i]} logs NATS back`);
    // Publishes sent during the outage and timing out after the reconnect are that outage's, not a new one: wait past their time-out.
    await new Promise((r) => setTimeout(r, 3_000));
    for (const [i, s] of [a, b, c].entries()) {
      const said = since(s, i, "NATS").map((l) => String(l.msg).replace(/:.*/, ""));
      expect(said, `instance ${"abc"[i]}`).toEqual(["NATS unreachable", "NATS reachable again"]);
    }
    // What the lines say: A's publishes failed during it; C refused the read at once.
    const [aBack] = since(a, 0, "NATS reachable again");
    const [cBack] = since(c, 2, "NATS reachable again");
    expect(aBack.failed as number).toBeGreaterThanOrEqual(1);
    expect(cBack.refused as number).toBeGreaterThanOrEqual(1);
    expect(aBack.outageMs as number).toBeGreaterThanOrEqual(3_500);
  }, 90_000);

  it("a stored response created on B (the run driven on A), read and deleted on C: its run's events compacted into Postgres, then emptied by the delete", async () => {
    const h = { authorization: `Bearer ${keys.appKey}`, "content-type": "application/json" };
    const created = await b.fetch("/v1/responses", { method: "POST", headers: h, body: JSON.stringify({ model: "auto", user, input: `Hello ${tagged()}` }) });
    const response = (await created.json()) as { id: string; status: string; output_text?: string; output: { content?: { text: string }[] }[] };
    expect(created.status, JSON.stringify(response)).toBe(200);
    expect(response.status).toBe("completed");
    const runId = created.headers.get("service-run-id")!;
    const read = await c.fetch(`/v1/responses/${response.id}`, { headers: h });
    expect(read.status).toBe(200);
    expect(((await read.json()) as { output: unknown }).output).toEqual(response.output);
    const texts = () => withClient(databaseUrl, async (cl) => (await cl.query<{ text: string }>("SELECT data->>'text' AS text FROM run_events WHERE run_id = $1 AND kind = 'text_delta' ORDER BY seq", [runId])).rows.map((r) => r.text).join(""));
    // Compacted at the run's end: its text is in Postgres (control for the emptying below).
    await pollUntil(texts, (t) => t === "Hello from the stand-in model.", 10_000, "the response's text compacted into run_events");
    const deleted = await c.fetch(`/v1/responses/${response.id}`, { method: "DELETE", headers: h });
    expect(deleted.status).toBe(200);
    expect(await texts()).toBe("");
    expect((await c.fetch(`/v1/responses/${response.id}`, { headers: h })).status).toBe(404);
  });

  it("NATS unreachable at start: the instance says which URL and how to go on, and does not start (control: the same instance starts with NATS up)", async () => {
    const dead = `nats://127.0.0.1:${await freePort()}`;
    const out = await runServerToExit(tempDir("svc-nats-down-"), { DATABASE_URL: databaseUrl, NATS_URL: dead }, 30_000);
    expect(out.code).not.toBe(0);
    expect(out.stdout + out.stderr).toContain(`NATS_URL: could not connect to ${dead}`);
    expect(out.stdout + out.stderr).not.toMatch(/\n\s+at /);
    const up = await instance(databaseUrl, { NATS_URL: nats.url });
    expect(up.logs().find((l) => l.msg === "listening")).toMatchObject({ runBus: "nats" });
    await up.stop();
  }, 60_000);
});


