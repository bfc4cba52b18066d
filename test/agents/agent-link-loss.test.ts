import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, expect, it, onTestFailed } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { onEachDatabase } from "../helpers/databases.js";
import { serverBehindLink, type Link } from "../helpers/link.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { DEFAULT_ANSWER, startAnthropicStandIn, USAGE, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";

/**
 * Agent runs live through a lost link: the real Claude Code (the pinned CLI) served
 * by a real `svc-worker` whose link to the service goes through a TCP link the test
 * silences (no close, no reset: a dead network path, as when a laptop changes
 * networks). The worker keeps the CLI running, its events numbered and kept; the
 * run waits for the machine; on reconnect the job resumes from the last event the
 * service stored. The app (the SDK) talks to the service directly, and answers
 * during the cut. Short limits: a 3 s heartbeat timeout, a 60 s grace.
 */
const HEARTBEAT_TIMEOUT_S = 3;
const GRACE_S = 60;
const CUT_MS = 20_000;

onEachDatabase("an agent run through a lost link, on $db.name", (db) => {
  let link: Link;
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let svc: Svc;
  let direct: string;
  let workdir: string;
  let claudeHome: string;
  let machineHome: string;
  let worker: WorkerProcess;
  let sleeper: WorkerProcess | null = null;
  let model: ModelStandIn | null = null;
  const user = "traveller";

  const startWorker = () => {
    worker = spawnWorker(["start"], machineHome, { HOME: claudeHome, ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin" });
    return worker;
  };

  beforeAll(async () => {
    anthropic = await startAnthropicStandIn();
    let api: Parameters<typeof pairViaApi>[0];
    ({ server, link, direct, api } = await serverBehindLink((env) => startTestServerOn(db, env, { runningClock: true }), {
      WORKER_HEARTBEAT_TIMEOUT_SECONDS: String(HEARTBEAT_TIMEOUT_S),
      RUN_MACHINE_GRACE_SECONDS: String(GRACE_S),
    }));
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${direct}/v1` });
    workdir = fs.realpathSync(tempDir("svc-cut-work-"));
    claudeHome = fs.realpathSync(tempDir("svc-cut-home-"));
    const machine = await pairViaApi(api, server.dev, user, {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false, claude: CLAUDE_BIN },
      // Three runs at once (an agent CLI takes one by default); a fourth waits for a slot.
      maxConcurrentJobs: { "claude-code": 3 },
      policy: { agents: { "claude-code": true }, sandbox: { required: false }, env: ["ANTHROPIC_BASE_URL"], providerKeys: ["ANTHROPIC_API_KEY"] },
    });
    machineHome = machine.home;
    await startWorker().waitFor(/Connected/);
  }, 90_000);
  afterAll(async () => {
    worker?.stop();
    sleeper?.stop();
    await model?.close();
    await link?.close();
    await server?.close();
    await anthropic?.close();
    removeTempDirs();
  });

  const connections = () => (worker.stdout.match(/✓ Connected/g) ?? []).length;
  /** On a failure: what the worker printed and what the service logged about runs and machines. */
  const explain = () =>
    onTestFailed(() => {
      console.log(`worker stdout:\n${worker.stdout}\nworker stderr:\n${worker.stderr.slice(-4000)}`);
      console.log(server.logs.filter((l) => /run|machine|worker/.test(l) && !/"request"/.test(l)).slice(-60).join(""));
      void server.db.query(`SELECT id, status, agent_state FROM runs ORDER BY created_at`).then((rows) => console.log(JSON.stringify(rows, null, 1)));
    });

  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }

  /** The run's stored events, in order, with their sequence numbers. */
  async function stored(runId: string): Promise<{ seq: number; kind: string }[]> {
    const res = await fetch(`${direct}/v1/runs/${runId}/events`, { headers: { authorization: `Bearer ${server.dev.appKey}`, accept: "text/event-stream" } });
    const text = await res.text();
    return [...text.matchAll(/^id: (\d+)\nevent: (\w+)/gm)].map((m) => ({ seq: Number(m[1]), kind: m[2] }));
  }

  /** The run's `tokens` ledger rows, and the model calls the stand-in answered for prompts holding `marker`. */
  async function ledger(runId: string, marker: string) {
    const rows = await server.db.prisma.usageRow.findMany({ where: { runId, kind: "tokens" }, orderBy: { createdAt: "asc" } });
    const calls = anthropic.messages().filter((m) => JSON.stringify(m.messages).includes(marker)).length;
    return { rows: rows.map((r) => [Number(r.inputTokens), Number(r.outputTokens)]), calls };
  }

  it(
    "a link cut for 20 s mid-turn, during a pending permission and during a pending app tool call: each run completes, every event once, nothing asked twice, the ledger exact",
    async () => {
      explain();
      let cutStarted!: () => void;
      const cut = new Promise<void>((resolve) => (cutStarted = resolve));
      /**
       * The app answers during the cut: 1 s in (before the service notices the silence, at its 3 s heartbeat
       * timeout: the answer is sent down the dead link and lost, so it must be sent again on the resume), or
       * 5 s in (the machine is known to be away: the answer waits for it).
       */
      const answerDuringCut = async (ms: number) => {
        await cut;
        await new Promise((r) => setTimeout(r, ms));
      };
      const asked: string[] = [];
      const toolCalls: unknown[] = [];
      let askedBoth!: () => void;
      const bothAsked = new Promise<void>((resolve) => (askedBoth = resolve));
      const waiting = () => asked.length + toolCalls.length === 2 && askedBoth();

      // B: a command that needs the app's permission; C: one of the app's tools.
      const permission = svc.runs.create({
        user,
        prompt: "Write it down [[bash:echo through > cut.txt]]",
        onApproval: async (req) => {
          asked.push(`${req.what}:${req.tool}`);
          waiting();
          await answerDuringCut(5000);
          return true;
        },
      });
      const tool = svc.runs.create({
        user,
        prompt: 'Weather through the cut [[tool:weather {"city":"Oslo"}]]',
        tools: [
          {
            name: "weather",
            parameters: { type: "object", properties: { city: { type: "string" } } },
            run: async (args) => {
              toolCalls.push(args);
              waiting();
              await answerDuringCut(1000);
              return "snow, -3 C";
            },
          },
        ],
      });
      const permissionEvents = collect(permission);
      const toolEvents = collect(tool);
      await bothAsked;

      // A: a long streamed answer (200 words, one every 50 ms), cut after its first words.
      const streaming = svc.runs.create({ user, prompt: "Tell me everything [[slow]]" });
      const { events: streamingEvents, midTurn, done: streamed } = follow(streaming, 1);
      await midTurn;
      // D: a fourth run waits for a slot (the CLI's cap is 3): queued on the machine's link, never sent before the cut.
      const queued = svc.runs.create({ user, prompt: "Queued through the cut [[say:made it]]" });
      const queuedEvents = collect(queued);
      await pollUntil(async () => (await svc.runs.get(await queued.runId)).status, (st) => st === "queued", 10_000, "the fourth run queued");

      const before = connections();
      // The machine's link dead for 20 s, its reconnections held too: it is away the whole time.
      link.silence();
      cutStarted();
      const cutAt = Date.now();
      // The worker notices the silence and keeps its jobs; the service takes the machine for gone (the runs wait).
      await worker.waitFor(/keeping job_\w+ for 60 s[\s\S]*keeping job_\w+ for 60 s[\s\S]*keeping job_\w+ for 60 s/, 15_000);
      expect(worker.stdout.match(/keeping job_/g)).toHaveLength(3);
      await new Promise((r) => setTimeout(r, Math.max(0, CUT_MS - (Date.now() - cutAt))));
      link.restore();

      const [permissionResult, toolResult] = await Promise.all([permission.result(), tool.result()]);
      await streamed;
      const streamingResult = await streaming.result();
      // The worker came back once, and every job resumed from where the service had stored it.
      expect(connections()).toBe(before + 1);
      expect(worker.stdout.match(/↻ job_\w+ resumed after event \d+/g)).toHaveLength(3);

      // A: every word once, in order; the end said once.
      expect(streamingResult).toMatchObject({ status: "completed", output: "word ".repeat(200).trim() });
      const words = streamingEvents.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join("");
      expect(words).toBe("word ".repeat(200).trim());
      // B: asked once, answered during the cut, the command ran.
      expect(asked).toEqual(["permission:Bash"]);
      expect(permissionResult.status).toBe("completed");
      expect(fs.readFileSync(path.join(workdir, "cut.txt"), "utf8")).toBe("through\n");
      // C: called once, its result posted during the cut reached the CLI.
      expect(toolCalls).toEqual([{ city: "Oslo" }]);
      expect(toolResult).toMatchObject({ status: "completed", output: "The tool said: snow, -3 C" });
      // D: sent afresh once the machine was back (nothing of it had reached the machine), and completed.
      expect(await queued.result()).toMatchObject({ status: "completed", output: "made it" });
      expect((await queuedEvents).filter((e) => e.kind === "run_queued").length).toBeGreaterThan(0);

      for (const [run, live, marker] of [
        [streaming, streamingEvents, "[[slow]]"],
        [permission, await permissionEvents, "[[bash:echo through"],
        [tool, await toolEvents, "[[tool:weather"],
      ] as const) {
        const runId = await run.runId;
        const events = await stored(runId);
        // Stored once each, numbered without a gap; the app's stream saw each once, in the same order.
        expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
        expect(live.map((e) => e.kind)).toEqual(events.map((e) => e.kind));
        expect(events.filter((e) => e.kind === "approval_request").length).toBeLessThanOrEqual(1);
        expect(events.filter((e) => e.kind === "tool_call").length).toBeLessThanOrEqual(1);
        // The ledger: one row per model call the CLI made, each as the API reported it.
        const { rows, calls } = await ledger(runId, marker);
        expect(calls).toBeGreaterThan(0);
        expect(rows).toEqual(Array.from({ length: calls }, () => [USAGE.input_tokens, USAGE.output_tokens]));
      }
    },
    120_000,
  );

  it("a run the app cancels while its machine is cut off ends at once; when the link is back, the worker is told and stops the CLI it kept", async () => {
    explain();
    let asked = 0;
    const run = svc.runs.create({ user, prompt: "Weather, then never mind [[tool:weather]]", tools: [{ name: "weather", run: () => (asked++, new Promise<string>(() => {})) }] });
    const events = collect(run);
    await pollUntil(async () => asked, (n) => n === 1, 30_000, "the tool call");
    const mark = worker.stdout.length;
    const said = (pattern: RegExp, what: string) => pollUntil(async () => pattern.test(worker.stdout.slice(mark)), (ok) => ok, 20_000, what);
    link.silence();
    await said(/keeping job_\w+ for 60 s/, "the job kept");
    const cancelledAt = Date.now();
    await svc.runs.cancel(await run.runId, { reason: "the user left" });
    const result = await run.result();
    expect(result.status).toBe("cancelled");
    expect(Date.now() - cancelledAt).toBeLessThan(5_000);
    link.restore();
    await said(/✗ job_\w+: its run ended while the link was down; the job is stopped/, "the kept job stopped");
    expect((await events).filter((e) => e.kind === "tool_call")).toHaveLength(1);
    // Positive control: the machine serves the next run.
    const next = svc.runs.create({ user, prompt: "Back? [[say:back]]" });
    await collect(next);
    expect(await next.result()).toMatchObject({ status: "completed", output: "back" });
  }, 90_000);

  /** Kills the worker (SIGKILL, with its CLI) once `toolAsked` says the CLI waits on the app's tool, then starts it again; `before` runs in between. */
  async function killAndRestart(waiting: () => boolean, before: () => void = () => {}): Promise<void> {
    await pollUntil(async () => waiting(), (ok) => ok, 30_000, "the CLI waiting on the app's tool");
    worker.stop();
    await worker.exited;
    before();
    await startWorker().waitFor(/Connected/);
  }

  it("the worker killed (SIGKILL) mid-run and started again: the CLI's saved session resumes, the call it waited on is dropped, and the run completes; its record is gone after, its session kept as the user's policy says", async () => {
    explain();
    let asked = 0;
    const run = svc.runs.create({
      user,
      prompt: "Weather before a crash [[tool:weather]]",
      tools: [{ name: "weather", run: () => (asked++, new Promise<string>(() => {})) }],
    });
    const events = collect(run);
    // The job is on disk while it runs: a record, and the CLI's session under its id.
    const records = () => (fs.existsSync(path.join(machineHome, "jobs")) ? fs.readdirSync(path.join(machineHome, "jobs")).filter((n) => n.endsWith(".job.json")) : []);
    // Killed once the CLI has saved its session with the call it waits on (Claude Code writes its transcript as it goes).
    const projects = path.join(claudeHome, ".claude", "projects");
    // This run's session file only: the sessions of the earlier runs stay on the machine (sessions.keepDays), some with the same call.
    const sessionId = ((await server.db.prisma.run.findUniqueOrThrow({ where: { id: await run.runId } })).request as { session: { id: string } }).session.id;
    const savedCall = () =>
      fs.existsSync(projects) &&
      fs.readdirSync(projects).some((d) => {
        const file = path.join(projects, d, `${sessionId}.jsonl`);
        return fs.existsSync(file) && fs.readFileSync(file, "utf8").includes("mcp__app__weather");
      });
    await killAndRestart(() => asked === 1 && records().length === 1 && savedCall());
    const result = await run.result();
    expect(result).toMatchObject({ status: "completed", output: DEFAULT_ANSWER });
    const seen = await events;
    expect(seen.filter((e) => e.kind === "tool_call")).toHaveLength(1);
    const restarted = seen.filter((e) => e.kind === "activity" && (e.detail as { restarted?: boolean } | undefined)?.restarted);
    expect(restarted).toHaveLength(1);
    expect((restarted[0] as { detail: { droppedCalls: string[] } }).detail.droppedCalls).toHaveLength(1);
    expect(worker.stdout).toMatch(/↻ job_\w+ resumed after a restart of the worker/);
    // The CLI went on from its own saved conversation: the model saw the first prompt again, then why it stopped.
    const resumed = anthropic.messages().filter((m) => JSON.stringify(m.messages).includes("restarted while you worked"));
    expect(resumed.length).toBeGreaterThan(0);
    expect(JSON.stringify(resumed[0].messages)).toContain("Weather before a crash");
    // Once the run ended its job record is gone; the CLI's session stays as the user's policy says (sessions.keepDays,
    // 7 by default: a follow-up may resume it), listed in the worker's sessions.json.
    await pollUntil(async () => records().length, (n) => n === 0, 10_000, "the job's record removed");
    const id = ((await server.db.prisma.run.findUniqueOrThrow({ where: { id: result.runId } })).request as { session: { id: string } }).session.id;
    const kept = (JSON.parse(fs.readFileSync(path.join(machineHome, "sessions.json"), "utf8")) as { sessions: { id: string }[] }).sessions.map((x) => x.id);
    expect(kept).toContain(id);
    const sessions = fs.existsSync(projects) ? fs.readdirSync(projects).flatMap((d) => fs.readdirSync(path.join(projects, d)).filter((f) => f.endsWith(".jsonl"))) : [];
    expect(sessions).toContain(`${id}.jsonl`);
  }, 90_000);

  it("the worker restarted without its jobs folder, or without the CLI's saved session: the run ends worker_restarted, saying the CLI's run is gone; the next run is served", async () => {
    explain();
    const wipes: [string, () => void, RegExp][] = [
      ["its jobs folder", () => fs.rmSync(path.join(machineHome, "jobs"), { recursive: true, force: true }), /does not hold job/],
      ["the CLI's session", () => fs.rmSync(path.join(claudeHome, ".claude", "projects"), { recursive: true, force: true }), /had not saved its session/],
    ];
    for (const [what, wipe, why] of wipes) {
      let asked = 0;
      const run = svc.runs.create({
        user,
        prompt: `Weather before a wipe of ${what} [[tool:weather]]`,
        tools: [{ name: "weather", run: () => (asked++, new Promise<string>(() => {})) }],
      });
      const events = collect(run);
      await killAndRestart(() => asked === 1, wipe);
      const result = await run.result();
      expect(result, what).toMatchObject({ status: "failed", error: { code: "worker_restarted" } });
      expect(result.error?.message, what).toMatch(/no longer holds this run's agent CLI/);
      expect(result.error?.message, what).toMatch(why);
      expect((await events).filter((e) => e.kind === "tool_call")).toHaveLength(1);
    }
    // Positive control: the restarted worker serves the next run.
    const next = svc.runs.create({ user, prompt: "Still there? [[say:yes]]" });
    await collect(next);
    expect(await next.result()).toMatchObject({ status: "completed", output: "yes" });
  }, 120_000);

  it("the machines stopped (SIGSTOP of the worker and its CLI) for 20 s, past the heartbeat timeout, then continued (SIGCONT), as a laptop sleeps: the agent run and the model run complete", async () => {
    explain();
    // A second machine serving a local model (its own worker), asleep at the same time.
    model = await startModelStandIn();
    const m = await pairViaApi({ url: direct, fetch: (p, init) => fetch(`${direct}${p}`, init) }, server.dev, "napper", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
    sleeper = spawnWorker(["start"], m.home);
    await sleeper.waitFor(/Connected/);
    const agent = svc.runs.create({ user, prompt: "A long one before a nap [[slow]]" });
    const modelRun = svc.runs.create({ user: "napper", model: "llama3.2:3b", prompt: "A long one [slow]" });
    const agentEvents = collect(agent);
    const { events: modelEvents, midTurn, done: modelDone } = follow(modelRun, 3);
    await midTurn;
    await pollUntil(async () => anthropic.messages().filter((b) => JSON.stringify(b.messages).includes("before a nap")).length, (n) => n > 0, 20_000, "the agent's model call");
    const sleeping = [...processTree(worker.child.pid!), ...processTree(sleeper.child.pid!)];
    // Positive control: the CLI is among what sleeps.
    expect(sleeping.some((pid) => commandOf(pid).includes("claude"))).toBe(true);
    for (const pid of sleeping) process.kill(pid, "SIGSTOP");
    const before = { agent: connections(), model: (sleeper.stdout.match(/✓ Connected/g) ?? []).length };
    // The service takes both machines for gone (3 s heartbeat timeout), then they wake.
    await pollUntil(async () => (await svc.users.compute("napper")).machines[0]?.state, (st) => st === "offline", 15_000, "the sleeping machine offline");
    await new Promise((r) => setTimeout(r, 20_000));
    for (const pid of sleeping) process.kill(pid, "SIGCONT");
    await modelDone;
    const [agentResult, modelResult] = await Promise.all([agent.result(), modelRun.result()]);
    expect(agentResult).toMatchObject({ status: "completed", output: "word ".repeat(200).trim() });
    expect((await agentEvents).flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join("")).toBe("word ".repeat(200).trim());
    expect(worker.stdout).toMatch(/↻ job_\w+ resumed after event \d+/);
    expect(connections()).toBe(before.agent + 1);
    // The model run's turn in flight ran again behind turn_restarted, and completed.
    expect(modelResult.status).toBe("completed");
    expect(modelEvents.filter((e) => e.kind === "turn_restarted")).toHaveLength(1);
    expect((sleeper.stdout.match(/✓ Connected/g) ?? []).length).toBe(before.model + 1);
  }, 120_000);
});

/** Reads a run's events as they come: `midTurn` once `deltas` text deltas came, `done` at its end. */
function follow(stream: AsyncIterable<RunEvent>, deltas: number): { events: RunEvent[]; midTurn: Promise<void>; done: Promise<void> } {
  const events: RunEvent[] = [];
  let reached!: () => void;
  const midTurn = new Promise<void>((resolve) => (reached = resolve));
  const done = (async () => {
    let seen = 0;
    for await (const e of stream) {
      events.push(e);
      if (e.kind === "text_delta" && ++seen === deltas) reached();
    }
  })();
  return { events, midTurn, done };
}

/** A process and all its descendants (Linux /proc), parents first. */
function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (pid: number) => (out.push(pid), (children.get(pid) ?? []).forEach(walk));
  walk(root);
  return out;
}

function commandOf(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ");
  } catch {
    return "";
  }
}
