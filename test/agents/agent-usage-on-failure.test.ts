import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Svc, type RunEvent, type RunResult } from "@svc/sdk";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { onEachDatabase } from "../helpers/databases.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { startAnthropicStandIn, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";

/** The real Claude Code CLI (a pinned dev dependency). */
const CLAUDE = CLAUDE_BIN;
/** How long a lost machine is waited for here. */
const GRACE_S = 5;

/**
 * Issue 29: every token an agent run's model used is in the ledger once, however
 * the run ends. The real server on each database, a real `svc-worker start`, the
 * real Claude Code 2.1.197 against the Anthropic stand-in: a first model call that
 * reports 100 input / 10 output tokens (a `Read` of a file, run without asking),
 * then a second call that fails (an API error), is cancelled, passes the run's
 * deadline or loses its link while it streams. What the second call's start
 * reported (its 100 input tokens and the first output token, as Anthropic's
 * `message_start` says them) is counted when it was cut off; nothing is counted
 * twice. A completed run is the control: its calls, once.
 */
onEachDatabase("agent runs count their tokens whatever the ending ($db.name)", (db) => {
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let svc: Svc;
  let workdir: string;
  const started: WorkerProcess[] = [];

  /** A machine of `user` serving the real Claude Code against the stand-in (its API retries capped at one, so a 529 gives up fast). */
  async function machineOf(user: string): Promise<WorkerProcess> {
    const machine = await pairViaApi(server, server.dev, user, {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false, claude: CLAUDE },
      policy: { agents: { "claude-code": true }, sandbox: { required: false }, env: ["ANTHROPIC_BASE_URL", "CLAUDE_CODE_MAX_RETRIES"], providerKeys: ["ANTHROPIC_API_KEY"] },
    });
    const w = spawnWorker(["start"], machine.home, {
      HOME: fs.realpathSync(tempDir("svc-usage-home-")),
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: "sk-ant-standin",
      CLAUDE_CODE_MAX_RETRIES: "1",
    });
    started.push(w);
    await w.waitFor(/Connected/);
    return w;
  }

  beforeAll(async () => {
    // A short grace: a machine whose worker was killed is waited for 5 s (its agent CLI's run could resume within it).
    server = await startTestServerOn(db, { RUN_MACHINE_GRACE_SECONDS: String(GRACE_S) }, { runningClock: true });
    anthropic = await startAnthropicStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    workdir = fs.realpathSync(tempDir("svc-usage-work-"));
    fs.writeFileSync(path.join(workdir, "notes.txt"), "line one\nline two\n");
    await machineOf("dana");
  }, 90_000);
  afterAll(async () => {
    for (const w of started) w.stop();
    await server?.close();
    await anthropic?.close();
    removeTempDirs();
  });

  /** The first call reads a file (100 in / 10 out); the second is shaped by `then`. */
  const prompt = (then: string) => `Look [[read:notes.txt]] [[usage:100/10]] ${then}`.trim();

  /** The run's token rows, as the API lists them (`GET /v1/usage?user=…&run=…`), in id order: [input, output, cache read, cache write]. */
  async function ledger(user: string, runId: string): Promise<number[][]> {
    const page = await svc.usage.list({ user, run: runId });
    return page.data.filter((r) => r.kind === "tokens").map((r) => [r.inputTokens, r.outputTokens, r.cacheReadTokens, r.cacheWriteTokens]);
  }

  /**
   * The ledger once the run has ended, checked to stay so (a late report of the
   * worker, a retried write, counts nothing again), with its rows' unique keys
   * apart and the run's own totals, its usage events and its result agreeing.
   */
  async function countedOnce(user: string, runId: string, events: RunEvent[], result: RunResult, expected: number[][]): Promise<void> {
    expect(await ledger(user, runId)).toEqual(expected);
    await new Promise((r) => setTimeout(r, 1500));
    expect(await ledger(user, runId)).toEqual(expected);
    const rows = await server.db.prisma.usageRow.findMany({ where: { runId, kind: "tokens" }, orderBy: { id: "asc" } });
    expect(rows.map((r) => r.uniqueKey)).toEqual(expected.map((_, n) => `tokens:${runId}:${n + 1}`));
    const sum = (i: number) => expected.reduce((t, row) => t + row[i], 0);
    // The run's record, the stream's usage events and the SDK's result say the same totals.
    const run = await svc.runs.get(runId);
    expect(run.usage).toMatchObject({ inputTokens: sum(0), outputTokens: sum(1) });
    expect(events.filter((e) => e.kind === "usage").map((e) => [e.turn, e.usage.inputTokens, e.usage.outputTokens])).toEqual(expected.map((row, n) => [n + 1, row[0], row[1]]));
    expect(result.usage).toEqual({ inputTokens: sum(0), outputTokens: sum(1) });
  }

  /** Starts a run of `user` and reads its events; `onEvent` sees each as it comes. */
  async function runOf(user: string, text: string, options: Partial<Parameters<Svc["runs"]["create"]>[0]> = {}, onEvent: (e: RunEvent, seen: RunEvent[], runId: string) => Promise<void> | void = () => {}) {
    const run = svc.runs.create({ user, prompt: text, ...options });
    const events: RunEvent[] = [];
    const runId = await run.runId;
    for await (const e of run) {
      events.push(e);
      await onEvent(e, events, runId);
    }
    return { runId, events, result: await run.result() };
  }
  /** The second call's text deltas seen so far. */
  const deltas = (events: RunEvent[]) => events.filter((e) => e.kind === "text_delta").length;

  it("a completed run (the control): each model call counted, once", async () => {
    const { runId, events, result } = await runOf("dana", prompt(""));
    expect(result.status).toBe("completed");
    expect(result.output).toContain("line one");
    await countedOnce("dana", runId, events, result, [
      [100, 10, 0, 0],
      [100, 10, 0, 0],
    ]);
    expect(events.at(-1)).toMatchObject({ kind: "run_completed", usage: { inputTokens: 200, outputTokens: 20 } });
  });

  it.each([400, 529])("the model API answers %i on the second call: the run fails, the first call's tokens are counted once", async (status) => {
    const { runId, events, result } = await runOf("dana", prompt(`[[fail-after:1:${status}]]`));
    expect(result).toMatchObject({ status: "failed", error: { code: `api_error_${status}` } });
    await countedOnce("dana", runId, events, result, [[100, 10, 0, 0]]);
  });

  it("cancelled while the second call streams: the first call and what the second's start reported, once", async () => {
    const { runId, events, result } = await runOf("dana", prompt("[[slow]]"), {}, async (e, seen, id) => {
      if (e.kind === "text_delta" && deltas(seen) === 3) await svc.runs.cancel(id);
    });
    expect(result.status).toBe("cancelled");
    await countedOnce("dana", runId, events, result, [
      [100, 10, 0, 0],
      [100, 1, 0, 0],
    ]);
  });

  it("past the run's deadline while the second call streams: failed run_timeout, the same tokens once", async () => {
    // The deadline runs from when the job is sent: the first call is allowed to run its command late
    // enough that the second call (about 6 s of text) is still streaming when it passes.
    const runTimeoutMs = 12_000;
    const at = Date.now();
    const { runId, events, result } = await runOf("dana", "Write [[bash:echo late > late.txt]] [[usage:100/10]] [[slow]]", {
      limits: { runTimeoutMs },
      onApproval: async () => (await new Promise((r) => setTimeout(r, Math.max(0, at + runTimeoutMs - 4000 - Date.now()))), true),
    });
    expect(result).toMatchObject({ status: "failed", error: { code: "run_timeout" } });
    // The second call had begun: its text was streaming when the deadline passed.
    expect(deltas(events)).toBeGreaterThan(0);
    await countedOnce("dana", runId, events, result, [
      [100, 10, 0, 0],
      [100, 1, 0, 0],
    ]);
  }, 60_000);

  it("the machine's worker killed while the second call streams and never back: failed worker_lost past the grace, the same tokens once (the open call as its last write stored it)", async () => {
    const lost = await machineOf("lena");
    const { runId, events, result } = await runOf("lena", prompt("[[slow]]"), {}, (e, seen) => {
      if (e.kind === "text_delta" && deltas(seen) === 3) lost.stop();
    });
    expect(result).toMatchObject({ status: "failed", error: { code: "worker_lost" } });
    expect(result.error?.message).toMatch(new RegExp(`unreachable for longer than the ${GRACE_S} s`));
    await countedOnce("lena", runId, events, result, [
      [100, 10, 0, 0],
      [100, 1, 0, 0],
    ]);
    // The user's whole ledger holds them too (`GET /v1/usage?user=lena`): the run's row, and these tokens once.
    const all = (await svc.usage.list({ user: "lena" })).data;
    expect(all.filter((r) => r.kind === "tokens").reduce((t, r) => t + r.inputTokens, 0)).toBe(200);
    expect(all.filter((r) => r.kind === "run").map((r) => r.runId)).toEqual([runId]);
  }, 60_000);
});
