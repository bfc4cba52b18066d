import fs from "node:fs";
import path from "node:path";
import { execFile, spawn, spawnSync } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { testNode } from "../../scripts/test-tools.mjs";
import { releaseFiles, workerVersion } from "../../server/pairing/worker-release.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { installIntoAsync, packSdkAsync } from "../helpers/sdk-package.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";

/**
 * Issue 30: the worker and the SDK keep working on what end users and apps have, Node 20, 22
 * and 24 (the service itself runs on 24). Each Node is a real binary of that major from
 * test/tools (`testNode`), and each runs what people get, not this tree's sources:
 *
 * - the worker's single file as the service serves it (`/worker/svc-worker-<version>.mjs`),
 *   paired with `pair` (the user approving the code), then `start`ed, serving a run on the
 *   model stand-in as its `ollama`, the app's tool call crossing it, to the end;
 * - the SDK's packed tarball installed into an empty app, whose plain ESM script drives a run
 *   on `svc/echo` with a tool call the SDK answers itself, and a streamed chat completion.
 *
 * One server, one model stand-in, one download and one SDK build for the three Nodes; the
 * Nodes one after the other.
 */

const execFileAsync = promisify(execFile);
const VERSION = workerVersion();
const MAJORS = [20, 22, 24] as const;

/** The app's script, run by each Node: what it got back, as one JSON line. */
const SDK_SCRIPT = `
import { Svc } from "@svc/sdk";

const { user } = JSON.parse(process.argv[2]);
const svc = new Svc(); // SVC_API_KEY, SVC_BASE_URL
const calls = [];
const run = svc.runs.create({
  user,
  model: "svc/echo",
  prompt: JSON.stringify([{ say: "Looking it up." }, { call: "weather", arguments: { city: "Paris" } }, { say: "It is {{result}}." }]),
  tools: [{ name: "weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } }, run: async (args, ctx) => (calls.push({ args, callId: ctx.callId }), { temp: 21 }) }],
});
const kinds = [];
for await (const event of run) kinds.push(event.kind);
const result = await run.result();
const stored = await svc.runs.get(result.runId);

const stream = await svc.chat.completions.create({ model: "svc/echo", user, messages: [{ role: "user", content: "one two three" }], stream: true, stream_options: { include_usage: true } });
const pieces = [];
let usage = null;
for await (const chunk of stream) {
  const text = chunk.choices[0]?.delta?.content;
  if (text) pieces.push(text);
  if (chunk.usage) usage = chunk.usage;
}
const seen = await svc.users.retrieve(user);
console.log(JSON.stringify({
  node: process.version,
  calls,
  kinds,
  run: { status: result.status, output: result.output, route: result.route, usage: result.usage, stored: stored.status, runId: result.runId },
  chat: { pieces, usage },
  user: seen.id,
}));
`;

describe("the worker and the SDK on Node 20, 22 and 24", () => {
  let server: TestServer;
  let model: ModelStandIn;
  let svc: Svc;
  /** The worker's single file, downloaded from the service as a user would. */
  let workerFile: string;
  /** An empty app with the SDK's tarball installed, and its script: built while the first worker runs. */
  let app: Promise<string>;

  beforeAll(async () => {
    const dir = tempDir("svc-node-sdk-");
    app = (async () => {
      const where = path.join(dir, "app");
      await installIntoAsync(where, await packSdkAsync(dir));
      fs.writeFileSync(path.join(where, "run.mjs"), SDK_SCRIPT);
      return where;
    })();
    app.catch(() => {}); // awaited (and its failure reported) by the SDK's tests
    server = await startTestServer({ kind: "pglite", dataDir: null }, { DEVICE_POLL_INTERVAL: "1" }, { runningClock: true });
    model = await startModelStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    const res = await server.fetch(`/worker/${releaseFiles(VERSION).singleFile}`);
    expect(res.status).toBe(200);
    workerFile = path.join(tempDir("svc-node-worker-"), releaseFiles(VERSION).singleFile);
    fs.writeFileSync(workerFile, Buffer.from(await res.arrayBuffer()));
  }, 120_000);
  afterAll(async () => {
    await app?.catch(() => {});
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  describe.each(MAJORS.map((major) => ({ major, bin: testNode(major) })))("Node $major", ({ major, bin }) => {
    const workers: WorkerProcess[] = [];
    afterAll(() => {
      for (const w of workers) w.stop();
    });

    /** The Node binary, or: failed in CI (it must be there), skipped with the reason elsewhere. */
    function node(ctx: TestContext): string {
      if (bin) return bin;
      const why = `no Node ${major} binary in test/tools for ${process.platform}-${process.arch} (test/tools/package.json installs node${major} for linux-x64 only)`;
      if (process.env.CI) throw new Error(`${why}; CI must run the worker and the SDK on Node ${major}`);
      return ctx.skip(why);
    }
    /** What a user's shell has: nothing of this test run (no NODE_OPTIONS, no npm_* variables). */
    const shell = (home: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({ PATH: process.env.PATH, HOME: home, ...extra });
    const user = `node${major}-user`;

    it(`is Node ${major}`, (ctx) => {
      const r = spawnSync(node(ctx), ["-p", "process.version"], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout.trim()).toMatch(new RegExp(`^v${major}\\.\\d+\\.\\d+$`));
    });

    it("the worker's single file pairs, connects and serves a run with a tool call to the end: the stand-in's text and usage", async (ctx) => {
      const bin = node(ctx);
      const home = tempDir("svc-node-home-");
      const configDir = path.join(home, ".config", "svc-worker");
      const version = spawnSync(bin, [workerFile, "--version"], { env: shell(home), encoding: "utf8" });
      expect([version.status, version.stdout.trim()], version.stderr).toEqual([0, VERSION]);

      // Paired as a user does it: the code it prints, approved on the user's side.
      const pairing = new WorkerProcess(spawn(bin, [workerFile, "pair", "--connect-key", server.dev.connectKey, "--server", server.url], { cwd: home, env: shell(home), stdio: ["ignore", "pipe", "pipe"], detached: true }), home);
      workers.push(pairing);
      const userCode = await pairing.userCode();
      const session = await server.fetch("/v1/end_users/session", { method: "POST", headers: { "content-type": "application/json", ...bearer(server.dev.appKey) }, body: JSON.stringify({ user }) });
      const approved = await server.fetch("/v1/device/approve", { method: "POST", headers: { "content-type": "application/json", ...bearer(((await session.json()) as { session: string }).session) }, body: JSON.stringify({ user_code: userCode }) });
      expect(approved.status).toBe(200);
      expect(await pairing.exited, pairing.stdout + pairing.stderr).toEqual({ code: 0, signal: null });
      const { machineId } = JSON.parse(fs.readFileSync(path.join(configDir, "credentials.json"), "utf8")) as { machineId: string };
      const machine = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: machineId }, include: { endUser: true } });
      expect([machine.endUser.externalId, machine.clientVersion]).toEqual([user, VERSION]);

      // What it serves: the model stand-in as its ollama, nothing else (the CLIs on PATH stay out).
      const settingsFile = path.join(configDir, "config.json");
      const settings = JSON.parse(fs.readFileSync(settingsFile, "utf8")) as Record<string, unknown>;
      fs.writeFileSync(settingsFile, JSON.stringify({ ...settings, runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } }), { mode: 0o600 });
      const serving = new WorkerProcess(spawn(bin, [workerFile, "start"], { cwd: home, env: shell(home), stdio: ["ignore", "pipe", "pipe"], detached: true }), home);
      workers.push(serving);
      await serving.waitFor(new RegExp(`✓ Connected to Local development app as ${machineId}; serving ollama`));
      // The process serving is this Node's binary itself.
      if (fs.existsSync(`/proc/${serving.child.pid}/exe`)) expect(fs.realpathSync(`/proc/${serving.child.pid}/exe`)).toBe(fs.realpathSync(bin));
      const advertised = async () => ((await (await server.fetch(`/v1/models?user=${user}`, { headers: bearer(server.dev.appKey) })).json()) as { data: { owned_by: string }[] }).data.some((m) => m.owned_by === "ollama");
      await pollUntil(advertised, (ok) => ok, 20_000, "the worker's runtimes advertised");

      const sent = model.requests.length;
      const calls: unknown[] = [];
      const run = svc.runs.create({
        user,
        prompt: "What is the weather?",
        tools: [{ name: "weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } }, run: (args) => (calls.push(args), "sunny") }],
      });
      const events: RunEvent[] = [];
      for await (const e of run) events.push(e);
      const result = await run.result();
      expect(result, serving.stdout + serving.stderr).toMatchObject({ status: "completed", output: "The tool said: sunny", route: "user-hardware", machineId, runtime: "ollama", stopReason: "end_turn" });
      // Two turns of the stand-in, 12 in and 7 out each.
      expect(result.usage).toMatchObject({ inputTokens: 24, outputTokens: 14 });
      expect(calls).toEqual([{ city: "Paris" }]);
      expect(events.filter((e) => e.kind === "text_delta").map((e) => (e as { text: string }).text).join("")).toBe("The tool said: sunny");
      expect(events.map((e) => e.kind)).toEqual(expect.arrayContaining(["run_started", "tool_call", "usage", "run_completed"]));
      expect(model.requests.length - sent).toBe(2);
      expect(serving.child.exitCode).toBeNull();
      expect(serving.stderr).toBe("");
      serving.stop();
    }, 120_000);

    it("the SDK's package, installed in an empty app, drives a run whose tool call it answers, and a streamed completion", async (ctx) => {
      const bin = node(ctx);
      const cwd = await app;
      const env = shell(cwd, { SVC_API_KEY: server.dev.appKey, SVC_BASE_URL: `${server.url}/v1` });
      const { stdout, stderr } = await execFileAsync(bin, ["run.mjs", JSON.stringify({ user })], { cwd, env, timeout: 60_000 }).catch((err: Error & { stdout?: string; stderr?: string }) => {
        throw new Error(`the app's script failed on Node ${major}: ${err.message}\n${err.stdout ?? ""}\n${err.stderr ?? ""}`);
      });
      expect(stderr).toBe("");
      const out = JSON.parse(stdout) as {
        node: string;
        calls: { args: unknown; callId: string }[];
        kinds: string[];
        run: { status: string; output: string; route: string; usage: unknown; stored: string; runId: string };
        chat: { pieces: string[]; usage: unknown };
        user: string;
      };
      expect(out.node).toMatch(new RegExp(`^v${major}\\.`));
      expect(out.calls).toEqual([{ args: { city: "Paris" }, callId: expect.any(String) }]);
      expect(out.kinds).toEqual(["run_started", "text_delta", "usage", "tool_call", "text_delta", "usage", "run_completed"]);
      expect(out.run).toMatchObject({ status: "completed", output: 'It is {"temp":21}.', route: "service", stored: "completed" });
      // The tool's answer reached the service as the SDK sent it.
      const toolCalls = await server.db.prisma.toolCall.findMany({ where: { runId: out.run.runId } });
      expect(toolCalls.map((c) => [c.callId, c.name, c.arguments, c.result])).toEqual([[out.calls[0].callId, "weather", { city: "Paris" }, { temp: 21 }]]);
      expect(out.chat.pieces.length).toBeGreaterThan(1);
      expect(out.chat.pieces.join("")).toBe("one two three");
      expect(out.chat.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
      expect(out.user).toBe(user);
    }, 240_000);
  });
});
