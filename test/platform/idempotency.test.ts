import { afterAll, beforeAll, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { sseFrames, type SseFrame } from "../helpers/sse.js";
import { expectError } from "../helpers/requests.js";

/**
 * `Idempotency-Key` on POSTs (Stripe's semantics), on each database and across
 * two instances sharing one: the same key and body give the first answer again
 * (a run start: the same run, its stream or its handback), counted once; the same
 * key with another body is 409; no key, no idempotency (two runs, counted twice).
 */
onEachDatabase("Idempotency-Key on $db.name", (db) => {
  let a: TestServer;
  /** A second instance on the same database (Postgres only; on PGlite the same one). */
  let b: TestServer;
  let drop: () => Promise<void> = async () => {};
  let model: ModelStandIn;
  let worker: WorkerProcess;

  beforeAll(async () => {
    const made = await db.create({ migrated: true });
    drop = made.drop;
    a = await startTestServer(made.target, {}, { runningClock: true });
    b = made.target.kind === "postgres" ? await startTestServer(made.target, { SVC_DEV_APP: "" }, { runningClock: true }) : a;
    model = await startModelStandIn();
    const m = await pairViaApi(a, a.dev, "mia", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
    worker = spawnWorker(["start"], m.home);
    await worker.waitFor(/Connected/);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    if (b && b !== a) await b.close();
    await a?.close();
    await drop();
    await model?.close();
    removeTempDirs();
  });

  const post = (on: TestServer, path: string, body: unknown, key?: string) =>
    on.fetch(path, { method: "POST", headers: { authorization: `Bearer ${a.dev.appKey}`, "content-type": "application/json", ...(key ? { "idempotency-key": key } : {}) }, body: JSON.stringify(body) });
  const runsOf = async (user: string) => {
    const runs = await a.db.query<{ id: string }>(`SELECT r.id FROM runs r JOIN end_users e ON e.id = r.end_user_id WHERE e.external_id = $1`, [user]);
    const rows = await a.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id WHERE e.external_id = $1 AND u.kind = 'run'`, [user]);
    return { runs: runs.map((r) => r.id), ledgerRuns: rows[0].n };
  };

  it("a handed-back run start repeated, and repeated at once on both instances, is one run and one ledger row; the same answer each time", async () => {
    const body = { user: "hugo", prompt: "hello", route: { prefer: ["app"] } };
    const first = await post(a, "/v1/runs", body, "start-hugo-1");
    await expectError(first, 409, "serve_in_app");
    const runId = first.headers.get("service-run-id");
    expect(runId).toMatch(/^run_/);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await Promise.all(Array.from({ length: 6 }, (_, i) => post(i % 2 ? b : a, "/v1/runs", body, "start-hugo-1")));
    for (const r of again) {
      expect(r.status).toBe(409);
      expect(r.headers.get("service-run-id")).toBe(runId);
      expect(r.headers.get("idempotent-replayed")).toBe("true");
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("serve_in_app");
    }
    expect(await runsOf("hugo")).toEqual({ runs: [runId], ledgerRuns: 1 });
  });

  it("concurrent first requests with one key, spread over both instances, start one run", async () => {
    const body = { user: "ines", prompt: "hello", route: { prefer: ["app"] } };
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => post(i % 2 ? b : a, "/v1/runs", body, "start-ines-1")));
    const ids = new Set(answers.map((r) => r.headers.get("service-run-id")));
    expect(answers.map((r) => r.status)).toEqual(answers.map(() => 409));
    expect(ids.size).toBe(1);
    expect(answers.filter((r) => r.headers.get("idempotent-replayed") === null)).toHaveLength(1);
    const { runs, ledgerRuns } = await runsOf("ines");
    expect(runs).toEqual([...ids]);
    expect(ledgerRuns).toBe(1);
  });

  it("the same key with another body (or another path) is 409 idempotency_key_reused and creates nothing", async () => {
    await expectError(await post(a, "/v1/runs", { user: "hugo", prompt: "something else", route: { prefer: ["app"] } }, "start-hugo-1"), 409, "idempotency_key_reused");
    await expectError(await post(b, "/v1/chat/completions", { model: "svc/echo", user: "hugo", messages: [{ role: "user", content: "x" }] }, "start-hugo-1"), 409, "idempotency_key_reused");
    expect((await runsOf("hugo")).runs).toHaveLength(1);
    // A key of 256 characters, or with a space, is refused before anything is done.
    await expectError(await post(a, "/v1/runs", { user: "hugo", prompt: "x", route: { prefer: ["app"] } }, "k".repeat(256)), 400, "invalid_request");
    await expectError(await post(a, "/v1/runs", { user: "hugo", prompt: "x", route: { prefer: ["app"] } }, "a key"), 400, "invalid_request");
    expect((await runsOf("hugo")).runs).toHaveLength(1);
  });

  it("without a key nothing is idempotent: two identical run starts and two identical chat completions are four runs, counted four times", async () => {
    const run = { user: "jon", prompt: "hello", route: { prefer: ["app"] } };
    const chat = { model: "auto", user: "jon", messages: [{ role: "user", content: "hi" }] };
    const ids = new Set<string | null>();
    for (const [path, body] of [["/v1/runs", run], ["/v1/runs", run], ["/v1/chat/completions", chat], ["/v1/chat/completions", chat]] as const) {
      const r = await post(a, path, body);
      await expectError(r, 409, "serve_in_app");
      ids.add(r.headers.get("service-run-id"));
    }
    expect(ids.size).toBe(4);
    expect(await runsOf("jon")).toMatchObject({ ledgerRuns: 4 });
    // With a key, a chat completion's repeat is the first one's answer (here the service's own echo: one record).
    const echo = { model: "svc/echo", user: "jon", messages: [{ role: "user", content: "say this" }] };
    const first = await post(a, "/v1/chat/completions", echo, "chat-jon-1");
    const second = await post(b, "/v1/chat/completions", echo, "chat-jon-1");
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(await second.json()).toEqual(await first.json());
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect((await runsOf("jon")).runs).toHaveLength(5);
  });

  it("a repeat arriving after the first answer named its run but before that answer was kept is the same answer, built again from the run (its time too)", async () => {
    const echo = { model: "svc/echo", user: "jon", messages: [{ role: "user", content: "say it again" }] };
    const first = await post(a, "/v1/chat/completions", echo, "chat-jon-window");
    expect(first.status).toBe(200);
    const answer = await first.json();
    // The window between the two writes of the first request: its run id kept (at its headers), its body not yet.
    await a.db.query(`UPDATE idempotency_keys SET state = 'running', status = NULL, headers = NULL, body = NULL WHERE key = 'chat-jon-window'`);
    await new Promise((r) => setTimeout(r, 1100));
    const second = await post(b, "/v1/chat/completions", echo, "chat-jon-window");
    expect(second.status).toBe(200);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(await second.json()).toEqual(answer);
  });

  it("a streamed run start repeated with its key re-attaches to the same run: the same events from the first, while it runs and after", async () => {
    const body = { user: "mia", prompt: "Tell me [slow]", route: { prefer: ["user-hardware"] } };
    const read = async (res: Response) => {
      const frames: SseFrame[] = [];
      for await (const f of sseFrames(res)) frames.push(f);
      return frames.map((f) => `${f.id} ${f.event} ${f.data}`);
    };
    const first = await post(a, "/v1/runs", body, "stream-mia-1");
    expect(first.status).toBe(200);
    const runId = first.headers.get("service-run-id");
    // While it runs (its answer comes a piece every 50 ms), on the other instance.
    const during = await post(b, "/v1/runs", body, "stream-mia-1");
    expect(during.status).toBe(200);
    expect(during.headers.get("service-run-id")).toBe(runId);
    expect(during.headers.get("idempotent-replayed")).toBe("true");
    const [one, two] = await Promise.all([read(first), read(during)]);
    expect(one.at(-1)).toMatch(/ run_completed /);
    expect(two).toEqual(one);
    const after = await post(a, "/v1/runs", body, "stream-mia-1");
    expect(after.headers.get("service-run-id")).toBe(runId);
    expect(await read(after)).toEqual(one);
    expect(await runsOf("mia")).toEqual({ runs: [runId], ledgerRuns: 1 });
  });

  it("any POST: a plan created with a key is created once; its repeat gets the 201 again, not plan_exists", async () => {
    const plan = { slug: "idem-pro", name: "Pro", allowance: { unit: "runs", limit: 10 } };
    const first = await post(a, "/v1/plans", plan, "plan-1");
    expect(first.status).toBe(201);
    const again = await post(b, "/v1/plans", plan, "plan-1");
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await again.json()).toEqual(await first.json());
    // Without the key the same request is what it always was.
    await expectError(await post(a, "/v1/plans", plan), 409, "plan_exists");
  });
});
