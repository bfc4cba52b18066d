import pg from "pg";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { withClient, onPostgres } from "../helpers/databases.js";
import { pollUntil, removeTempDirs, stopAll, type ServerProcess } from "../helpers/process.js";
import { textOf } from "../helpers/sse.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { pairViaApi, type WorkerProcess } from "../helpers/worker.js";
import { freePort, startBalancer, type Balancer } from "../helpers/balancer.js";
import { natsAvailable, startNats, type Nats } from "../helpers/nats.js";
import {
  answerer, claimedBy, count, expectStored, expectWhole, getRun, headers, instance, post, reattach, startRun, startWorker, stopWorkers, tagged, threeInstances, toolSaid, waitFrames, workers, type Keys, type ThreeInstances,
} from "../helpers/instances.js";

/**
 * Runs across several real server processes sharing one Postgres, with a real
 * worker process and raw HTTP, as an app behind a load balancer sees them: a run
 * started on one instance, driven on the one holding the worker's connection,
 * answered on a third, its stream re-attached anywhere; notifications lost; and
 * the driving instance killed outright, its runs taken over by the survivor.
 * Each on Postgres alone and on the run bus (NATS JetStream, `NATS_URL`): every
 * guarantee holds on both.
 */

/** Where run events go: Postgres alone, or the run bus on a NATS server of the test's own. */
const BUSES = [
  { name: "on Postgres", nats: false },
  ...(natsAvailable || process.env.CI ? [{ name: "on the NATS run bus", nats: true }] : []),
];

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

const settings = () => ({ runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
/** The model requests of one run (its prompt carries a unique tag). */
const requestsOf = (tag: string) => model.requests.filter((r) => JSON.stringify(r.messages).includes(tag));


for (const bus of BUSES) {
  onPostgres(`a run across three instances (A starts it, B holds the worker, C takes the answers) ${bus.name}`, (postgres) => {
    let a: ServerProcess;
    let b: ServerProcess;
    let c: ServerProcess;
    let keys: Keys;
    let databaseUrl: string;
    let worker: WorkerProcess;
    let set: ThreeInstances;
    const user = "traveller";
    let nats: Nats | null = null;

    beforeAll(async () => {
      nats = bus.nats ? await startNats() : null;
      set = await threeInstances(postgres, { env: nats ? { NATS_URL: nats.url } : {}, user, holder: "b", settings: settings() });
      ({ a, b, c, keys, databaseUrl, worker } = set);
    });
    afterAll(async () => {
      await set?.stop();
      await nats?.stop();
    });

    it("started on A, driven on B, answered on C, its stream dropped mid-answer and re-attached on B: every event once, in order; completed everywhere", async () => {
      const tag = tagged();
      const answers = answerer(keys, () => c);
      const first = await startRun(a, keys, { user, prompt: `Weather in Paris? [slow] ${tag}`, tools: [{ name: "weather" }] }, answers.onFrame);
      const { runId } = first;
      // The tool call was answered on C; hang up in the middle of the (slow) answer's text.
      await waitFrames(first, (fs) => fs.filter((f) => f.event === "text_delta" && f.data.turn === 2).length >= 5, 20_000, "text of the second turn on A");
      await first.drop();
      expect(first.frames.at(-1)!.event).toBe("text_delta");
      const lastSeen = first.frames.at(-1)!.id!;
      // Mid-run its events are in Postgres's run_events on Postgres alone, and only on the stream on the bus.
      const stored = await withClient(databaseUrl, async (cl) => (await cl.query<{ n: number }>("SELECT count(*)::int AS n FROM run_events WHERE run_id = $1", [runId])).rows[0].n);
      if (bus.nats) expect(stored).toBe(0);
      else expect(stored).toBeGreaterThanOrEqual(Number(lastSeen));
      // Away for a moment: what is written meanwhile comes from the stored events, the rest live.
      await new Promise((r) => setTimeout(r, 300));
      const second = await reattach(b, keys, runId, lastSeen, answers.onFrame);
      await second.ended;
      expect(second.broken).toBeNull();
      expect(Number(second.frames[0].id)).toBe(Number(lastSeen) + 1);
      await answers.allTaken();
      expect(answers.answers).toHaveLength(1);

      const all = [...first.frames, ...second.frames];
      expectWhole(all);
      expect(count(all, "run_started")).toBe(1);
      expect(count(all, "tool_call")).toBe(1);
      expect(count(all, "turn_restarted")).toBe(0);
      const done = all.at(-1)!.data as { output: string; usage: { inputTokens: number; outputTokens: number } };
      expect(done.output).toBe("word ".repeat(200));
      expect(textOf(all).get(2)).toBe(done.output);
      expect(done.usage).toMatchObject({ inputTokens: 24, outputTokens: 14 });
      // B drove it (the dispatch reached it), A and C did not.
      expect(claimedBy(b, runId)).toHaveLength(1);
      expect(claimedBy(a, runId)).toHaveLength(0);
      expect(claimedBy(c, runId)).toHaveLength(0);
      for (const s of [a, b, c]) {
        expect(await getRun(s, keys, runId)).toMatchObject({ status: "completed", turns: 2, output: done.output, lastEventId: all.length, usage: { inputTokens: 24, outputTokens: 14 } });
      }
      expect(requestsOf(tag)).toHaveLength(2);
      await expectStored(databaseUrl, runId, all.length, 2);
    });

    it("13 runs at once for a machine with a cap of 4 (10 with tool calls answered on A or C, 3 streaming long turns), started on A and C: the full ones wait and then run, all complete, every event once", async () => {
      const flip = { n: 0 };
      // Each answer goes to A or C in turn: a waiting run is woken on B whichever instance took its answer.
      const answers = answerer(keys, () => (flip.n++ % 2 ? c : a));
      const slow = await Promise.all([0, 1, 2].map((i) => startRun(i % 2 ? c : a, keys, { user, prompt: `Tell me a story [slow] ${tagged()}` }, answers.onFrame)));
      const tools = await Promise.all(
        Array.from({ length: 10 }, (_, i) => startRun(i % 2 ? a : c, keys, { user, prompt: `Weather? ${tagged()}`, tools: [{ name: "weather" }] }, answers.onFrame)),
      );
      const all = [...slow, ...tools];
      await Promise.all(all.map((r) => r.ended));
      for (const r of all) {
        expect(r.broken, r.runId).toBeNull();
        expectWhole(r.frames);
      }
      await answers.allTaken();
      expect(answers.answers).toHaveLength(10);
      // The machine's cap held: some runs waited for a slot, said so first, and still ran.
      const queued = all.filter((r) => count(r.frames, "run_queued") > 0);
      expect(queued.length).toBeGreaterThan(0);
      // A first turn or a later one (after its tool result) waited: either way the run went on after each wait.
      for (const r of queued) {
        const last = r.frames.map((f) => f.event).lastIndexOf("run_queued");
        expect(r.frames.slice(last).some((f) => f.event === "text_delta" || f.event === "tool_call"), r.runId).toBe(true);
      }
      for (const r of tools) expect(count(r.frames, "tool_call")).toBe(1);
      for (const r of all) expect((await getRun(b, keys, r.runId)).status).toBe("completed");
    }, 120_000);

    it("a chat completion posted on A runs on B's worker, plain and streamed, and is read back on C", async () => {
      const body = (stream: boolean) => JSON.stringify({ model: "auto", user, messages: [{ role: "user", content: `hi ${tagged()}` }], stream, stream_options: { include_usage: true } });
      const plain = await a.fetch("/v1/chat/completions", { method: "POST", headers: headers(keys), body: body(false) });
      expect(plain.status).toBe(200);
      const completion = (await plain.json()) as { choices: { message: { content: string } }[]; usage: unknown };
      expect(completion.choices[0].message.content).toBe("Hello from the stand-in model.");
      expect(completion.usage).toEqual({ prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 });
      const runId = plain.headers.get("service-run-id")!;
      expect(claimedBy(b, runId)).toHaveLength(1);
      expect(await getRun(c, keys, runId)).toMatchObject({ status: "completed", output: "Hello from the stand-in model." });

      const streamed = await a.fetch("/v1/chat/completions", { method: "POST", headers: headers(keys), body: body(true) });
      const text = await streamed.text();
      const chunks = text.split("\n\n").filter((f) => f.startsWith("data: ")).map((f) => f.slice(6));
      expect(chunks.at(-1)).toBe("[DONE]");
      const parsed = chunks.slice(0, -1).map((c) => JSON.parse(c) as { choices: { delta: { content?: string } }[]; usage?: unknown });
      expect(parsed.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("Hello from the stand-in model.");
      expect(parsed.at(-1)!.usage).toEqual({ prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 });
      expect(claimedBy(b, streamed.headers.get("service-run-id")!)).toHaveLength(1);
    });

    it("an approval answered on C, its tool's result too, the stream on A: completes, every event once", async () => {
      const tag = tagged();
      const answers = answerer(keys, () => c);
      const stream = await startRun(a, keys, { user, prompt: `The news, please ${tag}`, tools: [{ name: "news", needsApproval: true }] }, answers.onFrame);
      await stream.ended;
      expect(stream.broken).toBeNull();
      await answers.allTaken();
      expect(answers.answers).toHaveLength(2);
      const all = stream.frames;
      expectWhole(all);
      const kinds = all.map((f) => f.event);
      // The approval first; the tool call only once granted; then the answer.
      expect(kinds.indexOf("approval_request")).toBeGreaterThan(0);
      expect(kinds.indexOf("tool_call")).toBeGreaterThan(kinds.indexOf("approval_request"));
      const request = all.find((f) => f.event === "approval_request")!;
      const call = all.find((f) => f.event === "tool_call")!;
      expect(call.data).toMatchObject({ callId: request.data.callId, name: "news" });
      expect(toolSaid(all.at(-1)!.data.output)).toEqual({ tool: "news", temp: 21 });
      expect(claimedBy(b, stream.runId)).toHaveLength(1);
      for (const s of [a, b, c]) expect(await getRun(s, keys, stream.runId)).toMatchObject({ status: "completed", turns: 2, lastEventId: all.length });
      // Answered twice on C: refused, the first answer stands.
      const again = await post(c, keys, `/v1/runs/${stream.runId}/approval`, { approvalId: request.data.approvalId, decision: "deny" });
      expect(again.status).toBe(409);
      await expectStored(databaseUrl, stream.runId, all.length, 2);
    });

    it("notifications lost (every LISTEN connection of the database cut, again and again): the dispatch, the answer and the stream still get through by polling", async () => {
      const tag = tagged();
      const [{ datname }] = (await withClient(databaseUrl, (cl) => cl.query<{ datname: string }>("SELECT current_database() AS datname"))).rows;
      const listening = async () =>
        Number((await withClient(databaseUrl, (cl) => cl.query<{ n: string }>("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%'", [datname]))).rows[0].n);
      const before = await listening();
      expect(before).toBeGreaterThanOrEqual(3); // one per instance, every channel of it on that connection

      // Cut every LISTEN backend of this database every 10 ms for the whole run: whatever is
      // notified meanwhile is lost (each reopens 250 ms after its cut at the earliest).
      const killer = new pg.Client({ connectionString: databaseUrl });
      await killer.connect();
      let cutting = true;
      let cut = 0;
      const cutter = (async () => {
        while (cutting) {
          const r = await killer.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()", [datname]);
          cut += r.rowCount ?? 0;
          await new Promise((res) => setTimeout(res, 10));
        }
      })();
      try {
        await pollUntil(async () => cut, (n) => n >= before, 5_000, "the LISTEN connections cut");
        const answers = answerer(keys, () => c);
        let answeredAt = 0;
        const startedAt = Date.now();
        const stream = await startRun(a, keys, { user, prompt: `Weather? ${tag}`, tools: [{ name: "weather" }] }, (f, runId) => {
          if (f.event === "tool_call") answeredAt = Date.now();
          answers.onFrame(f, runId);
        });
        await Promise.race([stream.ended, new Promise((r) => setTimeout(r, 15_000))]);
        const finishedAt = Date.now();
        const all = stream.frames;
        expect(all.at(-1)?.event, all.map((f) => `${f.id}:${f.event}`).join(" ")).toBe("run_completed");
        await answers.allTaken();
        expectWhole(all);
        // Each lost wake is made up when the LISTEN connection comes back (every driver looks once): a few seconds in all, not a lease or an orphan timeout.
        expect(answeredAt - startedAt).toBeLessThan(5_000);
        expect(finishedAt - answeredAt).toBeLessThan(5_000);
        expect(claimedBy(b, stream.runId)).toHaveLength(1);
        for (const s of [a, b, c]) expect(await getRun(s, keys, stream.runId)).toMatchObject({ status: "completed", turns: 2 });
        await expectStored(databaseUrl, stream.runId, all.length, 2);
        // The cuts went on while the run ran (on the bus it needs no LISTEN at all and may end before another round of them).
        if (bus.nats) expect(cut).toBeGreaterThanOrEqual(before);
        else expect(cut).toBeGreaterThan(before);
      } finally {
        cutting = false;
        await cutter;
        await killer.end();
      }
      // And they all come back.
      await pollUntil(listening, (n) => n >= before, 25_000, "the LISTEN connections back");
    });
  });

  onPostgres(`kill -9 of the instance driving a run (two instances behind a TCP balancer, 2 s leases) ${bus.name}`, (postgres) => {
    let balancer: Balancer;
    let keys: Keys;
    let databaseUrl: string;
    let drop: () => Promise<void>;
    let home: string;
    let machineId: string;
    const user = "survivor";
    const running: ServerProcess[] = [];
    let nats: Nats | null = null;

    /** Both instances advertise the balancer, so the worker's credentials name it. */
    const leased = (port: number) => instance(databaseUrl, { PUBLIC_URL: balancer.url, RUN_LEASE_SECONDS: "2", ...(nats ? { NATS_URL: nats.url } : {}) }, port);

    beforeAll(async () => {
      nats = bus.nats ? await startNats() : null;
      const made = await postgres.create({ migrated: true });
      drop = made.drop;
      databaseUrl = (made.target as { url: string }).url;
      balancer = await startBalancer();
      const port = await freePort();
      const first = await leased(port);
      running.push(first);
      balancer.backends = [{ host: "127.0.0.1", port }];
      const banner = first.banner()!;
      // Both instances advertise the balancer: the pairing hands it to the worker.
      expect(banner.baseUrl).toBe(`${balancer.url}/v1`);
      keys = banner;
      const m = await pairViaApi(balancer, keys, user, settings());
      home = m.home;
      machineId = m.machineId;
      await first.stop();
    });
    afterEach(async () => {
      await stopWorkers(databaseUrl, machineId);
      await Promise.all(running.splice(0).map((s) => s.stop()));
    });
    afterAll(async () => {
      await balancer?.close();
      await drop?.();
      await nats?.stop();
    });

    /** Fresh X and Y behind the balancer (started at once), X first; the worker connected (through the balancer) to X. */
    async function pair(): Promise<{ x: ServerProcess; y: ServerProcess; w: WorkerProcess }> {
      const [px, py] = [await freePort(), await freePort()];
      const [x, y] = await Promise.all([leased(px), leased(py)]);
      running.push(x, y);
      balancer.backends = [
        { host: "127.0.0.1", port: px },
        { host: "127.0.0.1", port: py },
      ];
      const w = startWorker(home);
      await w.waitFor(/Connected/);
      await pollUntil(async () => x.logs().some((l) => l.msg === "worker online" && l.machineId === machineId), (ok) => ok, 10_000, "the worker online on X");
      return { x, y, w };
    }

    /** SIGKILL: no goodbye, no lease given up, its connections cut by the kernel. */
    async function kill(s: ServerProcess): Promise<void> {
      s.child.kill("SIGKILL");
      expect((await s.exited).signal).toBe("SIGKILL");
    }

    it("killed while the run waits on a tool result: the worker moves to Y, Y takes the run over from its saved transcript; no turn runs twice, nothing is counted twice", async () => {
      const { x, y, w } = await pair();
      const tag = tagged();
      const first = await startRun(x, keys, { user, prompt: `Weather and news ${tag}`, tools: [{ name: "weather" }, { name: "news" }] });
      const { runId } = first;
      const call = await waitFrames(first, (fs) => fs.some((f) => f.event === "tool_call")).then((fs) => fs.find((f) => f.event === "tool_call")!);
      await pollUntil(() => getRun(y, keys, runId), (r) => r.status === "waiting", 5_000, "the run waiting");
      const killedAt = Date.now();
      await kill(x);
      await first.ended;
      expect(first.broken).not.toBeNull();
      // The app, through its own balancer, talks to the survivor now: the answer first, then the stream.
      expect((await post(y, keys, `/v1/runs/${runId}/tool_result`, { callId: call.data.callId, result: { tool: "weather", temp: 21 } })).status).toBe(200);
      const answers = answerer(keys, () => y);
      const second = await reattach(y, keys, runId, first.frames.at(-1)!.id!, answers.onFrame);
      await Promise.race([second.ended, new Promise((r) => setTimeout(r, 25_000))]);
      const completedAfter = Date.now() - killedAt;
      await answers.allTaken();

      const all = [...first.frames, ...second.frames];
      expectWhole(all);
      expect(count(all, "turn_restarted")).toBe(0);
      expect(all.filter((f) => f.event === "tool_call").map((f) => f.data.name)).toEqual(["weather", "news"]);
      expect(all.filter((f) => f.event === "usage").map((f) => f.data.turn)).toEqual([1, 2, 3]);
      expect(all.at(-1)!.data).toMatchObject({ usage: { inputTokens: 36, outputTokens: 21 } });
      expect(toolSaid(all.at(-1)!.data.output)).toEqual({ tool: "news", temp: 21 });
      // Three model turns in all: the one before the kill was not run again.
      expect(requestsOf(tag)).toHaveLength(3);
      // Y sent the model the whole conversation it read back, a row a message: the prompt, the call and its result, then the next.
      expect(requestsOf(tag).map((r) => (r.messages as { role: string }[]).map((m) => m.role).join(" "))).toEqual(["user", "user assistant tool", "user assistant tool assistant tool"]);
      const conversation = await withClient(databaseUrl, (c) => c.query<{ n: number; role: string; column: unknown }>(
        "SELECT m.n, m.message->>'role' AS role, r.transcript AS column FROM run_messages m JOIN runs r ON r.id = m.run_id WHERE m.run_id = $1 ORDER BY m.n",
        [runId],
      ));
      expect(conversation.rows.map((m) => `${m.n} ${m.role}`)).toEqual(["0 user", "1 assistant", "2 tool", "3 assistant", "4 tool", "5 assistant"]);
      expect(conversation.rows.every((m) => m.column === null)).toBe(true);
      expect(claimedBy(y, runId)).toEqual([expect.objectContaining({ resumed: true })]);
      // Reconnected once, through the balancer, to Y.
      expect((w.stdout.match(/✓ Connected/g) ?? []).length).toBe(2);
      expect(balancer.forwarded.get(Number(new URL(y.url).port))).toBeGreaterThanOrEqual(1);
      expect(await getRun(y, keys, runId)).toMatchObject({ status: "completed", turns: 3, lastEventId: all.length });
      await expectStored(databaseUrl, runId, all.length, 3);
      // A lease (2 s) and a sweep, not an orphan timeout.
      expect(completedAfter).toBeLessThan(15_000);
    });

    it("killed in the middle of a model turn (after a tool result): Y runs that turn again with a turn_restarted event; its tokens are counted once", async () => {
      const { x, y, w } = await pair();
      const tag = tagged();
      const answers = answerer(keys, () => x);
      const first = await startRun(x, keys, { user, prompt: `Weather, at length [slow] ${tag}`, tools: [{ name: "weather" }] }, answers.onFrame);
      const { runId } = first;
      // Turn 2 streams a long answer, a piece every 50 ms: kill X a few pieces in.
      await waitFrames(first, (fs) => fs.filter((f) => f.event === "text_delta" && f.data.turn === 2).length >= 5, 20_000, "text of the second turn");
      await answers.allTaken();
      const killedAt = Date.now();
      await kill(x);
      await first.ended;
      expect(first.broken).not.toBeNull();
      const second = await reattach(y, keys, runId, first.frames.at(-1)!.id!);
      await Promise.race([second.ended, new Promise((r) => setTimeout(r, 30_000))]);
      const completedAfter = Date.now() - killedAt;

      const all = [...first.frames, ...second.frames];
      expectWhole(all);
      const restarted = all.filter((f) => f.event === "turn_restarted");
      expect(restarted.map((f) => f.data.turn)).toEqual([2]);
      // Whatever text of turn 2 came before it is dropped; after it, the whole answer once.
      const output = "word ".repeat(200);
      expect(all.at(-1)!.data).toMatchObject({ output, usage: { inputTokens: 24, outputTokens: 14 } });
      expect(textOf(all).get(2)).toBe(output);
      expect(all.filter((f) => f.event === "usage").map((f) => f.data.turn)).toEqual([1, 2]);
      expect(requestsOf(tag)).toHaveLength(3);
      expect(claimedBy(y, runId)).toEqual([expect.objectContaining({ resumed: true })]);
      expect((w.stdout.match(/✓ Connected/g) ?? []).length).toBe(2);
      expect(await getRun(y, keys, runId)).toMatchObject({ status: "completed", turns: 2, output, lastEventId: all.length });
      await expectStored(databaseUrl, runId, all.length, 2);
      expect(completedAfter).toBeLessThan(25_000);
    });

    it("killed while its machine (capped at 4) runs four long turns and two more runs wait for a slot: Y takes all six over, the waiting ones still wait their turn, all complete, every event once", async () => {
      const { x, y } = await pair();
      // Started on Y (their streams outlive X), driven on X, which holds the machine.
      const runs = await Promise.all(Array.from({ length: 6 }, () => startRun(y, keys, { user, prompt: `A story [slow] ${tagged()}` })));
      await pollUntil(async () => runs.filter((r) => count(r.frames, "run_queued") > 0).length, (n) => n === 2, 20_000, "two runs waiting for a slot");
      await pollUntil(async () => runs.filter((r) => count(r.frames, "text_delta") > 0).length, (n) => n >= 4, 20_000, "four runs streaming");
      await kill(x);
      await Promise.race([Promise.all(runs.map((r) => r.ended)), new Promise((r) => setTimeout(r, 60_000))]);
      for (const r of runs) {
        expect(r.broken, r.runId).toBeNull();
        expectWhole(r.frames);
        expect(r.frames.at(-1)!.data).toMatchObject({ output: "word ".repeat(200) });
        expect(await getRun(y, keys, r.runId)).toMatchObject({ status: "completed" });
        await expectStored(databaseUrl, r.runId, r.frames.length, 1);
      }
    }, 120_000);

    it("killed in the middle of its first model turn: Y runs it again from the prompt, with a turn_restarted event", async () => {
      const { x, y } = await pair();
      const tag = tagged();
      const first = await startRun(x, keys, { user, prompt: `A story [slow] ${tag}` });
      const { runId } = first;
      await waitFrames(first, (fs) => count(fs, "text_delta") >= 5, 20_000, "text of the first turn");
      await kill(x);
      await first.ended;
      const second = await reattach(y, keys, runId, first.frames.at(-1)!.id!);
      await Promise.race([second.ended, new Promise((r) => setTimeout(r, 30_000))]);

      const all = [...first.frames, ...second.frames];
      expectWhole(all);
      expect(all.filter((f) => f.event === "turn_restarted").map((f) => f.data.turn)).toEqual([1]);
      const output = "word ".repeat(200);
      expect(all.at(-1)!.data).toMatchObject({ output, usage: { inputTokens: 12, outputTokens: 7 } });
      expect(textOf(all).get(1)).toBe(output);
      expect(requestsOf(tag)).toHaveLength(2);
      expect(await getRun(y, keys, runId)).toMatchObject({ status: "completed", turns: 1, output, lastEventId: all.length });
      await expectStored(databaseUrl, runId, all.length, 1);
    });
  });
}
