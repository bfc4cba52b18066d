import fs from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { JobEvent } from "@svc/contract";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess, SANDBOX_REQUIRED } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { startModelStandIn, writeFakeClis, type ModelStandIn } from "../helpers/standins.js";

/**
 * A real `svc-worker start` process against the real server: it finds its
 * runtimes (a model stand-in speaking Ollama's API, fake `claude` and `codex`
 * CLIs speaking their stream-json), comes online, serves jobs and goes offline.
 */
describe("the worker connection with a real svc-worker", () => {
  let server: TestServer;
  let model: ModelStandIn;
  let bin: string;
  let workdir: string;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    model = await startModelStandIn();
    const dir = tempDir("svc-standins-");
    bin = writeFakeClis(dir);
    workdir = fs.mkdtempSync(path.join(dir, "project-"));
  });
  afterEach(() => {
    for (const w of workers.splice(0)) w.stop();
  });
  afterAll(async () => {
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  const settings = () => ({ workdir, runtimes: { ollama: model.url, llamacpp: false, lmstudio: false }, policy: { agents: { "claude-code": true, codex: true }, sandbox: { required: SANDBOX_REQUIRED } } });
  const startWorker = (home: string) => {
    const w = spawnWorker(["start"], home, { PATH: `${bin}${path.delimiter}${process.env.PATH}` });
    workers.push(w);
    return w;
  };
  const machinesOf = async (session: string) => ((await (await server.fetch("/v1/machines", { headers: bearer(session) })).json()) as { data: { id: string; state: string; runtimes: { name: string; kind: string; costClass: string; models: string[]; state: string }[] }[] }).data;
  /** Runs one job through the hub and gathers its events until it ends. */
  function runJob(m: { machineId: string }, user: string, job: Parameters<TestServer["services"]["workers"]["dispatch"]>[2], answer?: (e: JobEvent, handle: { answerPermission(id: string, allow: boolean, msg?: string): void; cancel(reason?: string): void }) => void) {
    return new Promise<JobEvent[]>(async (resolve) => {
      const owner = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: m.machineId } });
      const events: JobEvent[] = [];
      const handle = server.services.workers.dispatch({ appId: owner.appId, environment: owner.environment, endUserId: owner.endUserId }, m.machineId, job, (e) => {
        events.push(e);
        answer?.(e, handle);
        if (e.type === "done" || e.type === "failed") resolve(events);
      });
      void user;
    });
  }

  it("pairs, starts, says what it found, and comes online with its runtimes, models and cost classes", async () => {
    const m = await pairViaApi(server, server.dev, "alice", settings());
    expect((await machinesOf(m.session))[0].state).toBe("offline");
    const w = startWorker(m.home);
    await w.waitFor(/Connected to Local development app/);
    expect(w.stdout).toMatch(/serves ollama \(model, user_hardware\): llama3\.2:3b, qwen2\.5:7b/);
    expect(w.stdout).toMatch(/serves claude-code \(agent, user_subscription, 2\.1\.197, billed to the subscription\)/);
    expect(w.stdout).toMatch(/serves codex \(agent, user_subscription, 0\.169\.0, billed to the subscription\)/);
    expect(w.stdout).toMatch(/skips llamacpp: turned off in config/);

    const [machine] = await pollUntil(() => machinesOf(m.session), (ms) => ms[0]?.state === "online");
    expect(machine.runtimes.map((r) => [r.name, r.kind, r.costClass, r.state])).toEqual([
      ["claude-code", "agent", "user_subscription", "online"],
      ["codex", "agent", "user_subscription", "online"],
      ["ollama", "model", "user_hardware", "online"],
    ]);
    expect(machine.runtimes.find((r) => r.name === "ollama")!.models).toEqual(["llama3.2:3b", "qwen2.5:7b"]);

    // The app reads the same through its key; another user has nothing.
    const compute = await (await server.fetch("/v1/users/alice/compute", { headers: bearer(server.dev.appKey) })).json();
    expect(compute.user).toBe("alice");
    expect(compute.machines.map((x: { id: string; state: string }) => [x.id, x.state])).toEqual([[m.machineId, "online"]]);
    const nobody = await (await server.fetch("/v1/users/nobody/compute", { headers: bearer(server.dev.appKey) })).json();
    expect(nobody).toEqual({ user: "nobody", machines: [] });
  });

  it("serves a model turn: text streamed, tool calls whole, usage; one line per job", async () => {
    const m = await pairViaApi(server, server.dev, "bob", settings());
    const w = startWorker(m.home);
    await w.waitFor(/Connected/);
    await pollUntil(() => machinesOf(m.session), (ms) => ms[0]?.state === "online");

    const plain = await runJob(m, "bob", { kind: "model_turn", runtime: "ollama", model: "llama3.2:3b", messages: [{ role: "user", content: "hi" }] });
    expect(plain.filter((e) => e.type === "text_delta").map((e) => (e as { text: string }).text).join("")).toBe("Hello from the stand-in model.");
    expect(plain.at(-1)).toEqual({ type: "done", finishReason: "stop", output: "Hello from the stand-in model.", usage: { inputTokens: 12, outputTokens: 7 } });

    const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: { type: "object" } } }];
    const withTool = await runJob(m, "bob", { kind: "model_turn", runtime: "ollama", model: "llama3.2:3b", messages: [{ role: "user", content: "weather?" }], tools });
    expect(withTool).toContainEqual({ type: "tool_call", id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' });
    expect(withTool.at(-1)).toMatchObject({ type: "done", finishReason: "tool_calls" });
    expect(model.requests.at(-1)).toMatchObject({ model: "llama3.2:3b", stream: true, stream_options: { include_usage: true }, tools });

    const unknown = await runJob(m, "bob", { kind: "model_turn", runtime: "lmstudio", model: "x", messages: [{ role: "user", content: "hi" }] });
    expect(unknown).toEqual([{ type: "failed", code: "unknown_runtime", message: "This machine does not serve lmstudio." }]);
    await w.waitFor(/✓ job_\w+ done \(12 in, 7 out\)/);
    await w.waitFor(/→ job_\w+ model_turn on ollama llama3\.2:3b/);
  });

  it("runs Claude Code in the working folder, asking permission through the service; Codex too", async () => {
    const m = await pairViaApi(server, server.dev, "carol", settings());
    const w = startWorker(m.home);
    await w.waitFor(/Connected/);
    await pollUntil(() => machinesOf(m.session), (ms) => ms[0]?.state === "online");

    const allowed = await runJob(m, "carol", { kind: "agent_run", runtime: "claude-code", prompt: "list files" }, (e, h) => {
      if (e.type === "permission_request") h.answerPermission(e.requestId, true);
    });
    expect(allowed).toContainEqual({ type: "permission_request", requestId: "req_1", tool: "Bash", input: { command: "ls" }, description: "List files" });
    // The command is reported once its result is in, by the size of what it printed (the default policy).
    expect(allowed).toContainEqual({ type: "activity", summary: "ran ls (exit 0)", detail: { command: "ls", exitCode: 0, outputLines: 1, outputBytes: 5 } });
    expect(allowed.at(-1)).toEqual({
      type: "done",
      finishReason: "end_turn",
      output: `Ran ls in ${fs.realpathSync(workdir)} (prompt: list files)`,
      usage: { inputTokens: 30, cacheReadTokens: 0, cacheWriteTokens: 0, outputTokens: 11 },
    });

    const denied = await runJob(m, "carol", { kind: "agent_run", runtime: "claude-code", prompt: "delete it" }, (e, h) => {
      if (e.type === "permission_request") h.answerPermission(e.requestId, false, "not on my machine");
    });
    expect(denied.at(-1)).toMatchObject({ type: "done", output: "Not allowed: not on my machine (prompt: delete it)" });

    // Cancelled while it waits for an answer: the CLI is stopped on the machine, the job ends cancelled.
    const cancelled = await runJob(m, "carol", { kind: "agent_run", runtime: "claude-code", prompt: "wait" }, (e, h) => {
      if (e.type === "permission_request") h.cancel("the user changed their mind");
    });
    expect(cancelled.at(-1)).toEqual({ type: "failed", code: "cancelled", message: "The job was cancelled." });

    // The fake `codex` has no app-server: the worker falls back to `codex exec --json` (stdin closed, the prompt after --).
    const codex = await runJob(m, "carol", { kind: "agent_run", runtime: "codex", prompt: "tidy up" });
    expect(codex).toContainEqual({ type: "activity", summary: "ran bash -lc ls (exit 0)", detail: { command: "bash -lc ls", exitCode: 0, outputLines: 1, outputBytes: 6 } });
    expect(codex.at(-1)).toEqual({ type: "done", finishReason: "end_turn", output: `Worked in ${fs.realpathSync(workdir)} on: tidy up`, usage: { inputTokens: 24, outputTokens: 9, cacheReadTokens: 0, cacheWriteTokens: 0 } });
  });

  it("a CLI in a version the worker does not support is shown with its version and why, and never routed to", async () => {
    // The version is what the CLI says started as a job would be (the preflight): the fake reads it from a variable the policy passes.
    const m = await pairViaApi(server, server.dev, "olga", { workdir, runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false }, policy: { agents: { "claude-code": true }, sandbox: { required: SANDBOX_REQUIRED }, env: ["SVC_FAKE_CLAUDE_VERSION"] } });
    const w = spawnWorker(["start"], m.home, { PATH: `${bin}${path.delimiter}${process.env.PATH}`, SVC_FAKE_CLAUDE_VERSION: "1.0.3" });
    workers.push(w);
    await w.waitFor(/Connected/);
    expect(w.stdout).toMatch(/skips claude-code: claude-code 1\.0\.3 is not supported: this worker drives 2\.1\.0 up to \(not including\) 3\.0\.0/);
    const [machine] = await pollUntil(() => machinesOf(m.session), (ms) => ms[0]?.state === "online");
    expect(machine.runtimes).toEqual([expect.objectContaining({ name: "claude-code", version: "1.0.3", supported: false, billing: "subscription", note: expect.stringContaining("not supported") })]);
    const res = await server.fetch("/v1/runs", { method: "POST", headers: { ...bearer(server.dev.appKey), "content-type": "application/json" }, body: JSON.stringify({ user: "olga", prompt: "hi", model: "claude-code", route: { prefer: ["user-subscription"] } }) });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("no_compute");
  });

  it("finds llama.cpp, LM Studio and any OpenAI-compatible server through /v1/models, and drives each with the same chat API", async () => {
    const m = await pairViaApi(server, server.dev, "erin", {
      runtimes: { ollama: false, llamacpp: model.url, lmstudio: `${model.url}/`, openai: [{ name: "vllm", url: `${model.url}/v1`, apiKey: "sk-local" }], claude: false, codex: false },
    });
    const w = startWorker(m.home);
    await w.waitFor(/Connected/);
    const [machine] = await pollUntil(() => machinesOf(m.session), (ms) => ms[0]?.state === "online");
    expect(machine.runtimes.map((r) => [r.name, r.kind, r.costClass, r.models.length])).toEqual([
      ["llamacpp", "model", "user_hardware", 2],
      ["lmstudio", "model", "user_hardware", 2],
      ["openai-compatible:vllm", "model", "user_hardware", 2],
    ]);
    expect(w.stdout).toMatch(/skips ollama: turned off in config/);
    expect(w.stdout).toMatch(/skips claude-code: turned off in config/);
    for (const runtime of ["llamacpp", "lmstudio", "openai-compatible:vllm"]) {
      const events = await runJob(m, "erin", { kind: "model_turn", runtime, model: "qwen2.5:7b", messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }] });
      expect(events.at(-1)).toMatchObject({ type: "done", output: "Hello from the stand-in model." });
    }
  });

  it("agent CLIs found on PATH are served only when the user turned them on, and only with a working folder; it says why", async () => {
    const off = await pairViaApi(server, server.dev, "gina", { workdir, runtimes: { ollama: model.url, llamacpp: false, lmstudio: false } });
    const wOff = startWorker(off.home);
    await wOff.waitFor(/Connected/);
    expect(wOff.stdout).toMatch(/skips claude-code: not turned on/);
    expect(wOff.stdout).toMatch(/skips codex: not turned on/);
    expect(wOff.stdout).toContain("policy: agent CLIs off; sandbox required, network off; decides: read app, write app, command app, network machine, other app; command output: summary");
    const m = await pairViaApi(server, server.dev, "frank", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false }, policy: { agents: { "claude-code": true, codex: true }, sandbox: { required: SANDBOX_REQUIRED } } });
    const w = startWorker(m.home);
    await w.waitFor(/Connected/);
    expect(w.stdout).toMatch(/skips claude-code: found at .*claude, but no working folder is set/);
    expect(w.stdout).toMatch(/skips codex: found at .*codex, but no working folder is set/);
    expect(w.stdout).toContain("policy: agent CLIs claude-code, codex;");
    const [machine] = await pollUntil(() => machinesOf(m.session), (ms) => ms[0]?.state === "online");
    expect(machine.runtimes.map((r) => r.name)).toEqual(["ollama"]);
    const refused = await runJob(m, "frank", { kind: "agent_run", runtime: "claude-code", prompt: "rm -rf /" });
    expect(refused).toEqual([{ type: "failed", code: "unknown_runtime", message: "This machine does not serve claude-code." }]);
  });

  it("a job for another user's machine is refused before it is sent", async () => {
    const m = await pairViaApi(server, server.dev, "dave", settings());
    const w = startWorker(m.home);
    await w.waitFor(/Connected/);
    const owner = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: m.machineId } });
    const someoneElse = await server.db.prisma.endUser.findFirstOrThrow({ where: { externalId: "alice" } });
    expect(() =>
      server.services.workers.dispatch({ appId: owner.appId, environment: owner.environment, endUserId: someoneElse.id }, m.machineId, { kind: "agent_run", runtime: "codex", prompt: "x" }, () => {}),
    ).toThrow(/not connected here for this user/);
    expect(w.stdout).not.toMatch(/→ job_/);
  });
});
