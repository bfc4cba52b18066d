import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent, type RunStream } from "@svc/sdk";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { DEFAULT_ANSWER, startAnthropicStandIn, type AnthropicStandIn, type MessagesBody } from "../helpers/anthropic-standin.js";
import { startResponsesStandIn, type ResponsesStandIn } from "../helpers/responses-standin.js";
import { CLAUDE_BIN, CODEX_BIN } from "../../scripts/test-tools.mjs";

/**
 * Conversations with the real agent CLIs (Claude Code 2.1.197 in the native installer's layout, Codex 0.169.0),
 * inside real bubblewrap, on one paired machine, against stand-ins of their model APIs that record every request:
 * a follow-up resumes the CLI's own session there (the next request carries the earlier turns, a tool call and its
 * result included; the files it made are still in the working folder), also after the worker was restarted and
 * after the machine was offline for a minute; a session the end user forgot is said (`session_not_found`), or begun
 * afresh with the transcript when the app asked; a message sent while the CLI streams reaches it within that run.
 */
const sandboxed = (process.platform === "linux" && detectSandbox().kind === "bubblewrap") || process.env.SVC_TEST_SANDBOX === "1";
const SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin";

describe.runIf(sandboxed)("conversations with the real agent CLIs on the user's machine", () => {
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let responses: ResponsesStandIn;
  let svc: Svc;
  let root: string;
  let home: string;
  let workdir: string;
  let machineHome: string;
  let worker: WorkerProcess;
  const env = () => ({
    PATH: [path.dirname(CLAUDE_BIN), path.dirname(CODEX_BIN), SYSTEM_PATH].join(":"),
    HOME: home,
    ANTHROPIC_BASE_URL: anthropic.url,
    ANTHROPIC_API_KEY: "sk-ant-standin",
    CODEX_HOME: path.join(home, ".codex"),
    STANDIN_API_KEY: "sk-standin",
  });
  const startWorker = async () => {
    worker = spawnWorker(["start"], machineHome, env());
    await worker.waitFor(/Connected/, 60_000);
  };
  /** `svc-worker <args>` on the machine, as its user types it. */
  const cli = async (...args: string[]) => {
    const p = spawnWorker(args, machineHome, env());
    const { code } = await p.exited;
    return { code, out: p.stdout + p.stderr };
  };

  beforeAll(async () => {
    // Codex will not set up its home under /tmp: this machine lives in /var/tmp.
    root = fs.mkdtempSync("/var/tmp/svc-conversations-");
    home = path.join(root, "home");
    workdir = path.join(root, "project");
    fs.mkdirSync(path.join(home, ".codex"), { recursive: true });
    fs.mkdirSync(workdir, { recursive: true });
    server = await startTestServer({ kind: "pglite", dataDir: null }, { RUN_MACHINE_GRACE_SECONDS: "30" }, { runningClock: true });
    anthropic = await startAnthropicStandIn();
    responses = await startResponsesStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    fs.writeFileSync(
      path.join(home, ".codex", "config.toml"),
      `model = "standin-model"\nmodel_provider = "standin"\n[model_providers.standin]\nname = "standin"\nbase_url = "${responses.url}/v1"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\n`,
    );
    const m = await pairViaApi(server, server.dev, "conv-dana", {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false },
      policy: { agents: { "claude-code": true, codex: true }, env: ["ANTHROPIC_BASE_URL", "CODEX_HOME"], providerKeys: ["ANTHROPIC_API_KEY", "STANDIN_API_KEY"] },
    });
    machineHome = m.home;
    await startWorker();
  }, 180_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await anthropic?.close();
    await responses?.close();
    if (root) fs.rmSync(root, { recursive: true, force: true });
    removeTempDirs();
  });

  async function finish(run: RunStream): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of run) events.push(e);
    return events;
  }
  const weather = { name: "weather", description: "Today's weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } }, run: () => "sunny, 21 C" };
  const sessionOf = async (runId: string) => ((await server.db.prisma.run.findUniqueOrThrow({ where: { id: runId } })).request as { session?: { id: string; resume: boolean } }).session!;
  /** The Messages API requests Claude Code made since `from`, as role:text lines. */
  const claudeSince = (from: number): MessagesBody[] => anthropic.messages().slice(from);
  const flat = (body: MessagesBody) => JSON.stringify(body.messages);

  describe("Claude Code", () => {
    let first: RunStream;
    let second: RunStream;

    it("a follow-up resumes the CLI's own session: the next request carries the earlier turns (a tool call and its result), the file it made is still there", async () => {
      first = svc.runs.create({ user: "conv-dana", model: "claude-code", prompt: `Write notes [[tool:weather {"city":"Oslo"}]] [[bash:echo first > claude-notes.txt]]`, tools: [weather], onApproval: () => true });
      const events = await finish(first);
      expect((await first.result()).status).toBe("completed");
      expect(events[0]).toMatchObject({ kind: "run_started", session: "new" });
      expect(fs.readFileSync(path.join(workdir, "claude-notes.txt"), "utf8")).toBe("first\n");

      const from = anthropic.messages().length;
      second = first.followUp("What did you do? [[say:I wrote claude-notes.txt]]");
      const more = await finish(second);
      const result = await second.result();
      expect(result).toMatchObject({ status: "completed", output: "I wrote claude-notes.txt", runtime: "claude-code" });
      expect(more[0]).toMatchObject({ kind: "run_started", previousRunId: await first.runId, session: "resumed" });
      // The same session on the machine: the model sees the first run's prompt, its tool calls and their results, then the new prompt.
      const sent = flat(claudeSince(from)[0]);
      expect(sent).toContain("Write notes");
      expect(sent).toContain("sunny, 21 C");
      expect(sent).toContain("echo first > claude-notes.txt");
      expect(sent).toContain("What did you do?");
      expect((await sessionOf(await second.runId)).id).toBe((await sessionOf(await first.runId)).id);
      expect(fs.existsSync(path.join(workdir, "claude-notes.txt"))).toBe(true);
      // The session stays on the machine: listed there, never sent to the service (the service holds its id only).
      const listed = await cli("sessions");
      expect(listed.out).toContain((await sessionOf(await first.runId)).id);
    }, 180_000);

    it("the same after the worker was restarted between the two runs", async () => {
      worker.stop();
      await worker.exited;
      await startWorker();
      const from = anthropic.messages().length;
      const third = second.followUp("And before that? [[say:I checked the weather]]");
      await finish(third);
      expect(await third.result()).toMatchObject({ status: "completed", output: "I checked the weather" });
      const sent = flat(claudeSince(from)[0]);
      expect(sent).toContain("Write notes");
      expect(sent).toContain("What did you do?");
      expect(sent).toContain("And before that?");
    }, 120_000);

    it("a message sent while the CLI streams its answer reaches it within that run; user_message in order, ids without a gap", async () => {
      const from = anthropic.messages().length;
      const run = svc.runs.create({ user: "conv-dana", model: "claude-code", prompt: "Tell me a story [[slow]]" });
      const events: RunEvent[] = [];
      let sent: { delivery: string; messageId: string } | null = null;
      for await (const e of run) {
        events.push(e);
        if (e.kind === "text_delta" && !sent) sent = await run.send("Use the staging database, not prod. [[say:OK, staging it is.]]");
      }
      expect(sent?.delivery).toBe("now");
      const result = await run.result();
      expect(result.status).toBe("completed");
      expect(result.output).toBe("OK, staging it is.");
      const at = events.findIndex((e) => e.kind === "user_message");
      expect(events[at]).toMatchObject({ kind: "user_message", messageId: sent!.messageId, delivery: "now", content: expect.stringContaining("staging") });
      expect(at).toBeGreaterThan(events.findIndex((e) => e.kind === "text_delta"));
      // The stand-in saw it in the next request of the same run (the same CLI process, its session).
      const requests = claudeSince(from);
      expect(requests.length).toBe(2);
      expect(flat(requests[1])).toContain("Use the staging database");
      expect(flat(requests[1])).toContain("Tell me a story");
      const stored = await server.db.prisma.runUserMessage.findMany({ where: { runId: await run.runId } });
      expect(stored).toHaveLength(1);
      expect(stored[0].deliveredSeq).toBeGreaterThan(0);
    }, 120_000);

    it("a session the end user forgot: the follow-up fails session_not_found; asked to restart, it begins afresh with the transcript, said in session_restarted", async () => {
      // (No marker here: the restarted session's context carries this prompt, whose markers the stand-in would follow.)
      const run = svc.runs.create({ user: "conv-dana", model: "claude-code", prompt: "Remember the code word: heron." });
      await finish(run);
      const id = (await sessionOf(await run.runId)).id;
      // Positive control first: the session is there.
      expect((await cli("sessions")).out).toContain(id);
      const forgot = await cli("sessions", "forget", id);
      expect(forgot.code).toBe(0);
      expect((await cli("sessions")).out).not.toContain(id);
      const projects = path.join(home, ".claude", "projects");
      expect(fs.readdirSync(projects).flatMap((d) => fs.readdirSync(path.join(projects, d))).some((f) => f.startsWith(id))).toBe(false);

      const refused = run.followUp("What was the code word?");
      const events = await finish(refused);
      const r = await refused.result();
      expect(r).toMatchObject({ status: "failed", stopReason: "session_lost", error: { code: "session_not_found" } });
      expect(events.map((e) => e.kind)).not.toContain("text_delta");

      const from = anthropic.messages().length;
      const restarted = run.followUp("What was the code word? [[say:heron]]", { onSessionLost: "restart" });
      const out = await finish(restarted);
      expect(await restarted.result()).toMatchObject({ status: "completed", output: "heron" });
      expect(out.find((e) => e.kind === "session_restarted")).toMatchObject({ previousRunId: await run.runId, reason: expect.stringContaining("forgotten") });
      // The fresh session was told the conversation so far.
      const sent = flat(claudeSince(from)[0]);
      expect(sent).toContain("Remember the code word: heron.");
      expect(sent).toContain(DEFAULT_ANSWER);
      const fresh = await sessionOf(await restarted.runId);
      expect(fresh.id).not.toBe(id);
    }, 180_000);
  });

  describe("Codex", () => {
    it("a follow-up after the machine was offline for a minute resumes Codex's thread: the earlier shell call and its output are in the next request, the file is still there", async () => {
      const first = svc.runs.create({ user: "conv-dana", model: "codex", prompt: "Make a file [shell:echo codex > codex-notes.txt]" });
      const events = await finish(first);
      expect((await first.result()).status).toBe("completed");
      expect(events[0]).toMatchObject({ kind: "run_started", session: "new" });
      expect(fs.readFileSync(path.join(workdir, "codex-notes.txt"), "utf8")).toBe("codex\n");

      // The machine goes away for a minute (its worker stopped: offline to the service), then comes back.
      worker.stop();
      await worker.exited;
      const offline = await svc.runs.create({ user: "conv-dana", model: "codex", prompt: "anyone?", previousRunId: await first.runId }).result().catch((e: Error & { code?: string }) => e);
      expect((offline as { code?: string }).code).toBe("session_unavailable");
      await new Promise((r) => setTimeout(r, 60_000));
      await startWorker();

      const from = responses.requests.length;
      const second = first.followUp("What did you make?");
      const more = await finish(second);
      expect(await second.result()).toMatchObject({ status: "completed", runtime: "codex" });
      expect(more[0]).toMatchObject({ kind: "run_started", session: "resumed" });
      const input = JSON.stringify((responses.requests[from] as { input: unknown[] }).input);
      expect(input).toContain("Make a file");
      expect(input).toContain("function_call_output");
      expect(input).toContain("codex-notes.txt");
      expect(input).toContain("What did you make?");
      expect(fs.existsSync(path.join(workdir, "codex-notes.txt"))).toBe(true);
    }, 240_000);

    it("a message sent while Codex streams steers its turn (turn/steer): the next request of the same run carries it", async () => {
      const from = responses.requests.length;
      const run = svc.runs.create({ user: "conv-dana", model: "codex", prompt: "Write a long story [slow]" });
      const events: RunEvent[] = [];
      let sent: { delivery: string } | null = null;
      for await (const e of run) {
        events.push(e);
        if (e.kind === "text_delta" && !sent) sent = await run.send("Keep it short, please.");
      }
      expect(sent?.delivery).toBe("now");
      expect((await run.result()).status).toBe("completed");
      expect(events.filter((e) => e.kind === "user_message")).toHaveLength(1);
      const later = responses.requests.slice(from + 1).map((r) => JSON.stringify((r as { input: unknown[] }).input));
      expect(later.some((i) => i.includes("Keep it short, please."))).toBe(true);
    }, 120_000);
  });
});
