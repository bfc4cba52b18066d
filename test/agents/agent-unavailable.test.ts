import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, SvcError } from "@svc/sdk";
import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { DEFAULT_ANSWER, startAnthropicStandIn, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { startReceiver, type Receiver } from "../helpers/webhook-receiver.js";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";

/**
 * A machine that cannot sandbox says so to the app, not only in its own terminal; and
 * nothing of the end user's machine reaches the app in a failure. With the real Claude
 * Code (its native installer's layout), real bubblewrap and a real worker:
 *
 * - no bubblewrap on the machine (its PATH has none): the runtime is advertised
 *   `sandbox_missing`, `auto` refuses naming the cause, the terminal names the fix; once
 *   bubblewrap is installed, the running worker notices and serves the run (no restart, no pairing);
 * - bubblewrap there but refused by the host: the worker runs in a user namespace that may
 *   create no more (bubblewrap's own `--disable-userns`, as in a container that forbids
 *   them): `sandbox_refused`; after `svc-worker policy set sandbox.required false`, the running
 *   worker serves the run unconfined;
 * - a planted home path and user name in a failure: printed in full in the worker's
 *   terminal, never in the run's events, the refusal, the compute read, a webhook or
 *   anything the service stored.
 */
const sandboxed = (process.platform === "linux" && detectSandbox().kind === "bubblewrap") || process.env.SVC_TEST_SANDBOX === "1";
/** The machine's own programs; no bubblewrap among them is what "not installed" looks like to the worker. */
const SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin";
const CLAUDE_DIR = path.dirname(CLAUDE_BIN);
/** A user whose name and home must never reach the app. */
const PLANTED_USER = "zelda-planted-user";

describe.runIf(sandboxed)("agent CLIs that cannot run on the machine, and what the app is told", () => {
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let receiver: Receiver;
  let svc: Svc;
  let root: string;
  const workers: WorkerProcess[] = [];

  /** A paired machine with Claude Code turned on: its config folder, HOME and working folder. */
  async function machine(user: string, home = path.join(root, user, "home")) {
    const workdir = path.join(root, user, "project");
    fs.mkdirSync(home, { recursive: true });
    fs.mkdirSync(workdir, { recursive: true });
    const m = await pairViaApi(server, server.dev, user, {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false },
      policy: { agents: { "claude-code": true }, env: ["ANTHROPIC_BASE_URL"], providerKeys: ["ANTHROPIC_API_KEY"] },
    });
    return { config: m.home, home, workdir };
  }
  const start = (config: string, home: string, pathVar: string, wrapper: string[] = [], more: NodeJS.ProcessEnv = {}) => {
    const w = spawnWorker(["start"], config, { PATH: pathVar, HOME: home, ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin", ...more }, wrapper);
    workers.push(w);
    return w;
  };
  const runtimeOf = async (user: string) => (await svc.users.compute(user)).machines[0]?.runtimes.find((r) => r.name === "claude-code");
  /** A run on the user's compute only (no handback), through the SDK: its result, or the refusal's status and error. */
  async function runOn(user: string, model = "auto", prompt = "Say hello") {
    try {
      const run = svc.runs.create({ user, model, prompt, route: { prefer: ["user-subscription", "user-hardware"] } });
      const result = await run.result();
      return { status: 200, body: { ...result, id: result.runId } as Record<string, any> };
    } catch (err) {
      if (!(err instanceof SvcError)) throw err;
      return { status: err.status, body: { error: { code: err.code, message: err.message } } as Record<string, any> };
    }
  }

  beforeAll(async () => {
    // The webhook receiver is on loopback: the test environment's endpoints may reach it.
    server = await startTestServer({ kind: "pglite", dataDir: null }, { WEBHOOK_PRIVATE_ADDRESSES: "test" }, { runningClock: true });
    anthropic = await startAnthropicStandIn();
    receiver = await startReceiver();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    root = fs.mkdtempSync("/var/tmp/svc-unavailable-");
    const hook = await server.fetch("/v1/webhook_endpoints", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
      body: JSON.stringify({ url: receiver.url }),
    });
    expect(hook.status).toBe(201);
  }, 60_000);
  afterAll(async () => {
    for (const w of workers) w.stop();
    await server?.close();
    await anthropic?.close();
    await receiver?.close();
    if (root) fs.rmSync(root, { recursive: true, force: true });
    removeTempDirs();
  });

  it("no bubblewrap: advertised sandbox_missing, auto refuses naming it, the terminal names the fix; once installed, the running worker serves", async () => {
    const m = await machine("nobwrap");
    // Claude Code's link first on PATH, and no bwrap anywhere on it.
    const onlyClaude = path.join(root, "nobwrap", "bin");
    const laterBin = path.join(root, "nobwrap", "later-bin");
    fs.mkdirSync(onlyClaude);
    fs.mkdirSync(laterBin);
    fs.symlinkSync(CLAUDE_BIN, path.join(onlyClaude, "claude"));
    const w = start(m.config, m.home, `${onlyClaude}:${laterBin}`);
    await w.waitFor(/Connected/, 60_000);
    expect(w.stdout).toMatch(/skips claude-code: .*bubblewrap is not installed.*install bubblewrap.*svc-worker policy set sandbox\.required false/);
    const rt = await runtimeOf("nobwrap");
    expect(rt).toMatchObject({ supported: true, version: "2.1.197", unavailable: { reason: "sandbox_missing" } });
    expect(rt!.unavailable!.message).toMatch(/bubblewrap is not installed/);
    expect(rt!.unavailable!.message).toMatch(/sandbox\.required false/);
    const refused = await runOn("nobwrap");
    expect(refused.status).toBe(409);
    expect(refused.body.error.message).toMatch(/claude-code on nobwrap's .* cannot run there \(sandbox_missing\).*bubblewrap is not installed/);

    // The fix: bubblewrap installed (into a folder on the worker's PATH) while the worker runs: it notices, looks
    // again and tells the service; no restart, no new pairing.
    fs.symlinkSync(fs.realpathSync("/usr/bin/bwrap"), path.join(laterBin, "bwrap"));
    await w.waitFor(/looking again[\s\S]*now serving claude-code/, 30_000);
    await pollUntil(() => runtimeOf("nobwrap"), (r) => r?.unavailable === null, 10_000);
    const served = await runOn("nobwrap");
    expect(served.body).toMatchObject({ status: "completed", runtime: "claude-code", output: DEFAULT_ANSWER });
  }, 180_000);

  it("bubblewrap refused by the host: advertised sandbox_refused with the fix; after policy set sandbox.required false, the running worker serves unconfined", async () => {
    const m = await machine("refused");
    // A user namespace that may create no more of them (what a locked-down container or host does to bubblewrap).
    const host = ["bwrap", "--dev-bind", "/", "/", "--unshare-user", "--uid", "0", "--gid", "0", "--cap-drop", "ALL", "--disable-userns", "--"];
    const w = start(m.config, m.home, `${CLAUDE_DIR}:${SYSTEM_PATH}`, host);
    await w.waitFor(/Connected/, 60_000);
    expect(w.stdout).toMatch(/skips claude-code: .*refuses it.*user namespaces.*svc-worker policy set sandbox\.required false/);
    const rt = await runtimeOf("refused");
    expect(rt).toMatchObject({ unavailable: { reason: "sandbox_refused" } });
    const refused = await runOn("refused", "claude-code");
    expect(refused.status).toBe(409);
    expect(refused.body.error.message).toMatch(/cannot run there \(sandbox_refused\)/);

    // The user accepts unconfined runs here: the running worker applies it within seconds.
    const set = spawnWorker(["policy", "set", "sandbox.required", "false"], m.config);
    expect((await set.exited).code).toBe(0);
    await w.waitFor(/looking again[\s\S]*now serving claude-code/, 30_000);
    await pollUntil(() => runtimeOf("refused"), (r) => r?.unavailable === null, 10_000);
    const served = await runOn("refused", "claude-code");
    expect(served.body).toMatchObject({ status: "completed", runtime: "claude-code", output: DEFAULT_ANSWER });
  }, 180_000);

  it("a failure that names the user's home and name reaches the app without them, everywhere; the worker's terminal has it whole", async () => {
    const home = path.join(root, "planted", PLANTED_USER, "home");
    const m = await machine("planted", home);
    // Claude Code as the native installer leaves it, in the planted HOME.
    const versions = path.join(home, ".local", "share", "claude", "versions");
    fs.mkdirSync(versions, { recursive: true });
    fs.linkSync(fs.realpathSync(CLAUDE_BIN), path.join(versions, "2.1.197"));
    fs.mkdirSync(path.join(home, ".local", "bin"), { recursive: true });
    fs.symlinkSync("../share/claude/versions/2.1.197", path.join(home, ".local", "bin", "claude"));
    const w = start(m.config, home, `${path.join(home, ".local", "bin")}:${SYSTEM_PATH}`, [], { USER: PLANTED_USER, LOGNAME: PLANTED_USER });
    await w.waitFor(/Connected/, 60_000);
    // Control: it runs.
    expect((await runOn("planted", "claude-code")).body).toMatchObject({ status: "completed" });

    // The installed version removed under the running worker (an update gone wrong): the next job cannot start.
    fs.rmSync(path.join(versions, "2.1.197"));
    const failed = await runOn("planted", "claude-code");
    expect(failed.body).toMatchObject({ status: "failed", error: { code: "runtime_error" } });
    // The worker's terminal says exactly where (positive control: the planted text does reach it).
    await w.waitFor(new RegExp(`failed: runtime_error: .*${home.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`), 10_000);
    expect(w.stdout).toContain(PLANTED_USER);

    // The app: the run, its events, the webhooks sent, and everything the service stored.
    const runId = failed.body.id as string;
    const read = await (await server.fetch(`/v1/runs/${runId}`, { headers: { authorization: `Bearer ${server.dev.appKey}` } })).text();
    await receiver.waitFor(1, 20_000);
    await pollUntil(async () => receiver.received.some((r) => r.body.includes(runId)), (ok) => ok, 20_000);
    const stored = await server.db.query<{ t: string }>(
      `SELECT string_agg(t, ' ') AS t FROM (
         SELECT row_to_json(r)::text AS t FROM runs r UNION ALL SELECT row_to_json(e)::text FROM run_events e
         UNION ALL SELECT row_to_json(x)::text FROM runtimes x UNION ALL SELECT row_to_json(d)::text FROM webhook_deliveries d) all_rows`,
    );
    for (const [what, text] of [
      ["the run", JSON.stringify(failed.body)],
      ["the run's read", read],
      ["the webhooks", receiver.received.map((r) => r.body).join("\n")],
      ["the stored rows", stored[0].t],
    ] as const) {
      expect(text, what).toContain(runId);
      expect(text, what).not.toContain(root);
      expect(text, what).not.toContain(PLANTED_USER);
    }
    expect(failed.body.error.message).toMatch(/<path>/);
  }, 180_000);
});
