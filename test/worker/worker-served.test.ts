import crypto from "node:crypto";
import { execFile, spawn, spawnSync } from "node:child_process";
import { promisify } from "node:util";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { workerMessage } from "@svc/contract";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { WorkerProcess, pairViaApi, SANDBOX_REQUIRED } from "../helpers/worker.js";
import { connectRawWorker, closeRawWorkers } from "../helpers/raw-worker.js";
import { removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { bearer, expectError } from "../helpers/requests.js";
import { startAnthropicStandIn, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { releaseFiles } from "../../server/pairing/worker-release.js";
import { workerDownloadsRouter } from "../../server/pairing/worker-downloads.js";
import { createLogger } from "../../server/logger.js";
import { errorHandler } from "../../server/http/errors.js";
import { requestContext } from "../../server/http/request-context.js";
import express from "express";
import { Writable } from "node:stream";
import type WebSocket from "ws";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";

/**
 * The worker as the service hands it to end users: no registry name, only the
 * service's own URL. The pairing command exactly as `GET /v1/connect` (and so the
 * connect page) shows it, run in an empty folder by a user with their own HOME and
 * npm cache, against the real server; then the installed worker serving an agent
 * run whose app tool goes through its MCP bridge (inside the sandbox where the
 * machine has one). The same for the single file run with plain node.
 */

const execFileAsync = promisify(execFile);
const VERSION = (JSON.parse(fs.readFileSync(path.join(ROOT, "worker/package.json"), "utf8")) as { version: string }).version;
const FILES = releaseFiles(VERSION);
/** The real Claude Code CLI (a pinned dev dependency): the agent whose tool calls cross the worker's MCP bridge. */
const CLAUDE = CLAUDE_BIN;
/** Installing from an empty npm cache takes a while on a busy machine. */
const INSTALL_TIMEOUT_MS = 240_000;

/**
 * A user's shell: their own HOME (no ~/.npmrc, an empty npm cache), PATH, nothing of this test run's npm:
 * not its node_modules/.bin either, which puts the service's own Node (24) first; the user's is the machine's.
 */
function userEnv(home: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const PATH = (process.env.PATH ?? "").split(path.delimiter).filter((dir) => !dir.includes(`${path.sep}node_modules${path.sep}`) && !dir.endsWith(`${path.sep}node_modules`)).join(path.delimiter);
  return { PATH, HOME: home, npm_config_cache: path.join(home, ".npm"), npm_config_update_notifier: "false", ...extra };
}

/** Runs a command line the way a user pastes it (it has no quoting: each word is one argument). */
function runCommandLine(line: string, cwd: string, env: NodeJS.ProcessEnv, home: string): WorkerProcess {
  expect(line).toMatch(/^[\w./:@=+ -]+$/);
  const [command, ...args] = line.split(" ");
  return new WorkerProcess(spawn(command, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true }), home);
}

describe("the worker the service serves", () => {
  let server: TestServer;
  let anthropic: AnthropicStandIn;
  let svc: Svc;
  const workers: WorkerProcess[] = [];
  const sockets: WebSocket[] = [];
  const start = (w: WorkerProcess) => (workers.push(w), w);

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, { DEVICE_POLL_INTERVAL: "1" }, { runningClock: true });
    anthropic = await startAnthropicStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
  });
  afterAll(async () => {
    for (const w of workers) w.stop();
    await closeRawWorkers(sockets);
    await server?.close();
    await anthropic?.close();
    removeTempDirs();
  });

  async function session(user: string): Promise<string> {
    const res = await server.fetch("/v1/end_users/session", { method: "POST", headers: { "content-type": "application/json", ...bearer(server.dev.appKey) }, body: JSON.stringify({ user }) });
    return ((await res.json()) as { session: string }).session;
  }
  /** The user enters the code on the connect page and approves (the page's own calls). */
  async function approve(user: string, userCode: string) {
    const res = await server.fetch("/v1/device/approve", { method: "POST", headers: { "content-type": "application/json", ...bearer(await session(user)) }, body: JSON.stringify({ user_code: userCode }) });
    expect(res.status).toBe(200);
  }
  /** What the connect page shows the user (it renders `pairingCommand` as it is). */
  async function connectInfo(user: string) {
    const res = await server.fetch("/v1/connect", { headers: bearer(await session(user)) });
    expect(res.status).toBe(200);
    return (await res.json()) as { pairingCommand: string; worker: { version: string; packageUrl: string; scriptUrl: string } };
  }
  const collect = async (stream: AsyncIterable<RunEvent>) => {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  };

  /** Turns Claude Code on in a paired worker's settings (the user's policy), pointed at the stand-in. */
  function serveClaude(configDir: string, workdir: string) {
    const file = path.join(configDir, "config.json");
    const settings = JSON.parse(fs.readFileSync(file, "utf8")) as Record<string, unknown>;
    const more = {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false, claude: CLAUDE },
      policy: { agents: { "claude-code": true }, sandbox: { required: SANDBOX_REQUIRED }, env: ["ANTHROPIC_BASE_URL"], providerKeys: ["ANTHROPIC_API_KEY"] },
    };
    fs.writeFileSync(file, JSON.stringify({ ...settings, ...more }), { mode: 0o600 });
  }

  /** An agent run with one app tool: the call crosses the worker's MCP bridge (a helper process the CLI starts). */
  async function toolRun(user: string) {
    const calls: unknown[] = [];
    const run = svc.runs.create({
      user,
      prompt: 'Weather please [[tool:weather {"city":"Oslo"}]]',
      route: { prefer: ["user-subscription"] },
      tools: [{ name: "weather", description: "Today's weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, run: (args) => (calls.push(args), "snow, -3 C") }],
    });
    const events = await collect(run);
    return { result: await run.result(), calls, events };
  }

  it("serves the package and the single file as static, immutable files of the version it speaks", async () => {
    const pkg = await server.fetch(`/worker/${FILES.package}`);
    expect(pkg.status).toBe(200);
    const tgz = Buffer.from(await pkg.arrayBuffer());
    expect(pkg.headers.get("content-type")).toBe("application/gzip");
    expect(pkg.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(pkg.headers.get("x-content-type-options")).toBe("nosniff");
    expect(pkg.headers.get("content-disposition")).toBe(`attachment; filename="${FILES.package}"`);
    expect(pkg.headers.get("etag")).toBe(`"${crypto.createHash("sha256").update(tgz).digest("hex")}"`);
    expect(Number(pkg.headers.get("content-length"))).toBe(tgz.length);
    // Revalidation of an immutable file is a 304 (plain http: fetch marks a conditional request no-cache); HEAD has the headers and no body.
    const again = await new Promise<number | undefined>((resolve, reject) =>
      http.get(`${server.url}/worker/${FILES.package}`, { headers: { "if-none-match": pkg.headers.get("etag")! } }, (r) => (r.resume(), resolve(r.statusCode))).on("error", reject),
    );
    expect(again).toBe(304);
    const head = await server.fetch(`/worker/${FILES.package}`, { method: "HEAD" });
    expect([head.status, head.headers.get("content-length"), (await head.arrayBuffer()).byteLength]).toEqual([200, String(tgz.length), 0]);

    // An npm package: package/package.json of this version, the contract bundled in (no dependency on it), no sources.
    const tar = gunzipSync(tgz);
    const names: string[] = [];
    for (let at = 0; at + 512 <= tar.length && tar[at] !== 0; ) {
      const name = tar.subarray(at, at + 100).toString("utf8").replace(/\0.*$/s, "");
      const size = parseInt(tar.subarray(at + 124, at + 136).toString("utf8").replace(/\0.*$/s, "").trim(), 8);
      names.push(name);
      if (name === "package/package.json") {
        const manifest = JSON.parse(tar.subarray(at + 512, at + 512 + size).toString("utf8")) as { name: string; version: string; dependencies: Record<string, string> };
        expect([manifest.name, manifest.version]).toEqual(["svc-worker", VERSION]);
        expect(Object.keys(manifest.dependencies).sort()).toEqual(["@modelcontextprotocol/sdk", "@ts-rest/core", "commander", "eventsource-parser", "ws", "zod"]);
        // Exactly the versions this tree installed and tested.
        for (const v of Object.values(manifest.dependencies)) expect(v).toMatch(/^\d+\.\d+\.\d+$/);
      }
      at += 512 + Math.ceil(size / 512) * 512;
    }
    expect(names.sort()).toEqual(["package/LICENSE", "package/bin/svc-worker.js", "package/dist/index.js", "package/dist/main.js", "package/dist/mcp/bridge-server.js", "package/dist/policy/forwarder.mjs", "package/package.json"]);

    const script = await server.fetch(`/worker/${FILES.singleFile}`);
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(script.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(script.headers.get("content-security-policy")).toBe("default-src 'none'; sandbox");
    expect((await script.text()).startsWith(`// svc-worker ${VERSION}: the whole worker in one file.`)).toBe(true);

    // The unversioned names point at the current files and are not cached themselves.
    for (const [alias, file] of [
      ["svc-worker.tgz", FILES.package],
      ["svc-worker.mjs", FILES.singleFile],
    ]) {
      const r = await server.fetch(`/worker/${alias}`, { redirect: "manual" });
      expect([r.status, r.headers.get("location"), r.headers.get("cache-control")]).toEqual([302, `./${file}`, "no-cache"]);
    }
  });

  it("names no file from the request: other paths, encodings and methods get the error envelope", async () => {
    const probes = [
      "/worker/",
      "/worker",
      "/worker/manifest.json",
      "/worker/.build.lock",
      "/worker/svc-worker-0.0.1.tgz",
      `/worker/${FILES.package.toUpperCase()}`,
      `/worker/${FILES.package}%00`,
      `/worker/${FILES.package.replace(".tgz", "%2etgz")}`,
      "/worker/../package.json",
      "/worker/%2e%2e/package.json",
      "/worker/..%2fpackage.json",
      "/worker/..%5c..%5cpackage.json",
      "/worker/%2e%2e%2f%2e%2e%2fworker%2fpackage.json",
      "/worker/svc-worker-..%2f..%2fpackage.json.tgz",
    ];
    for (const probe of probes) {
      const res = await fetch(`${server.url}${probe}`, { redirect: "manual" });
      const body = await res.text();
      expect([404, 400], `${probe}: ${res.status} ${body.slice(0, 200)}`).toContain(res.status);
      expect(JSON.parse(body), probe).toMatchObject({ error: { code: expect.any(String), message: expect.any(String) } });
    }
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const res = await server.fetch(`/worker/${FILES.package}`, { method });
      await expectError(res, 405, "method_not_allowed");
      expect(res.headers.get("allow")).toBe("GET, HEAD");
    }
  });

  it("pairs with the command GET /v1/connect shows, run in an empty folder with its own HOME; the installed worker serves an agent run and its app tool", async () => {
    const info = await connectInfo("nina");
    const packageUrl = `${server.url}/worker/${FILES.package}`;
    expect(info.pairingCommand).toBe(`npx --yes ${packageUrl} pair --connect-key ${server.dev.connectKey} --server ${server.url}`);
    expect(info.worker).toEqual({ version: VERSION, packageUrl, scriptUrl: `${server.url}/worker/${FILES.singleFile}` });

    const folder = tempDir("svc-empty-");
    const home = tempDir("svc-user-home-");
    const began = Date.now();
    const pairing = start(runCommandLine(info.pairingCommand, folder, userEnv(home), home));
    const code = await pairing.userCode(INSTALL_TIMEOUT_MS);
    const installSeconds = (Date.now() - began) / 1000;
    await approve("nina", code);
    expect(await pairing.exited, pairing.stdout + pairing.stderr).toEqual({ code: 0, signal: null });
    expect(pairing.stdout).toMatch(/✓ Paired with Local development app as machine mch_/);
    process.stdout.write(`  npx installed and started the served package in ${installSeconds.toFixed(1)} s (empty npm cache)\n`);

    // Nothing was written into the folder; the pairing is where svc-worker keeps it by default, the user's alone.
    expect(fs.readdirSync(folder)).toEqual([]);
    const configDir = path.join(home, ".config", "svc-worker");
    const credentials = JSON.parse(fs.readFileSync(path.join(configDir, "credentials.json"), "utf8")) as { machineId: string; pairingToken: string };
    expect(credentials.pairingToken).toMatch(/^pt_svc_/);
    expect(fs.statSync(path.join(configDir, "credentials.json")).mode & 0o777).toBe(0o600);
    const machine = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: credentials.machineId }, include: { endUser: true } });
    expect([machine.endUser.externalId, machine.client, machine.clientVersion]).toEqual(["nina", "svc-worker", VERSION]);

    // Not spawnSync: npx may ask this very process's server for the package again, which a blocked event loop would never answer.
    const version = await execFileAsync("npx", ["--yes", packageUrl, "--version"], { cwd: folder, env: userEnv(home), encoding: "utf8", timeout: INSTALL_TIMEOUT_MS });
    expect(version.stdout.trim()).toBe(VERSION);

    // `start` from the same package (npx finds it in the user's cache), Claude Code turned on, the stand-in as its API.
    const workdir = tempDir("svc-work-");
    serveClaude(configDir, workdir);
    const env = userEnv(home, { ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin" });
    const serving = start(runCommandLine(`npx --yes ${packageUrl} start`, folder, env, home));
    await serving.waitFor(/✓ Connected to Local development app/, 120_000);
    expect(serving.stdout).toContain(`svc-worker ${VERSION}: machine ${credentials.machineId}`);
    // The same version as the service's: no update line.
    expect(serving.stdout).not.toMatch(/is available/);
    expect(server.services.workers.holds(credentials.machineId)).toBe(true);

    const { result, calls, events } = await toolRun("nina");
    expect(result, serving.stdout + serving.stderr).toMatchObject({ status: "completed", output: "The tool said: snow, -3 C", runtime: "claude-code" });
    expect(calls).toEqual([{ city: "Oslo" }]);
    expect(events.find((e) => e.kind === "run_started")).toMatchObject({ machineId: credentials.machineId });
    // The MCP bridge the CLI started was the installed package's, from the npx cache under the user's HOME.
    expect(fs.existsSync(path.join(home, ".npm", "_npx"))).toBe(true);
    expect(fs.readdirSync(folder)).toEqual([]);
  }, 600_000);

  it("the single file runs with plain node: --version, pairing, serving an agent run and its app tool", async () => {
    const info = await connectInfo("omar");
    const folder = tempDir("svc-single-");
    const home = tempDir("svc-user-home-");
    // As `curl -fLO <scriptUrl>` would.
    const res = await fetch(info.worker.scriptUrl);
    expect(res.status).toBe(200);
    const file = path.join(folder, FILES.singleFile);
    fs.writeFileSync(file, Buffer.from(await res.arrayBuffer()));

    const version = spawnSync(process.execPath, [file, "--version"], { cwd: folder, env: userEnv(home), encoding: "utf8" });
    expect([version.status, version.stdout.trim()]).toEqual([0, VERSION]);

    const args = info.pairingCommand.split(" ").slice(info.pairingCommand.split(" ").indexOf("pair"));
    expect(args.slice(0, 3)).toEqual(["pair", "--connect-key", server.dev.connectKey]);
    const pairing = start(new WorkerProcess(spawn(process.execPath, [file, ...args], { cwd: folder, env: userEnv(home), stdio: ["ignore", "pipe", "pipe"], detached: true }), home));
    await approve("omar", await pairing.userCode());
    expect(await pairing.exited, pairing.stdout + pairing.stderr).toEqual({ code: 0, signal: null });
    const configDir = path.join(home, ".config", "svc-worker");
    const credentials = JSON.parse(fs.readFileSync(path.join(configDir, "credentials.json"), "utf8")) as { machineId: string };
    const machine = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: credentials.machineId }, include: { endUser: true } });
    expect([machine.endUser.externalId, machine.clientVersion]).toEqual(["omar", VERSION]);

    const workdir = tempDir("svc-work-");
    serveClaude(configDir, workdir);
    const env = userEnv(home, { ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin" });
    const serving = start(new WorkerProcess(spawn(process.execPath, [file, "start"], { cwd: folder, env, stdio: ["ignore", "pipe", "pipe"], detached: true }), home));
    await serving.waitFor(/✓ Connected to Local development app/);
    // The app tool's call crosses the bridge, which here is the single file started in its helper mode.
    const { result, calls } = await toolRun("omar");
    expect(result, serving.stdout + serving.stderr).toMatchObject({ status: "completed", output: "The tool said: snow, -3 C" });
    expect(calls).toEqual([{ city: "Oslo" }]);
    expect(fs.readdirSync(folder)).toEqual([FILES.singleFile]);
  }, 300_000);

  it("tells an older svc-worker where the current one is, in welcome, and the worker says so", async () => {
    const m = await pairViaApi(server, server.dev, "pia");
    const welcomeFor = async (client: string, version: string) => {
      const raw = await connectRawWorker(server.url, m.token, sockets);
      raw.send(workerMessage("hello", { client, version, runtimes: [] }));
      const welcome = await raw.next("welcome");
      await raw.close();
      return welcome.payload;
    };
    const [major, minor, patch] = VERSION.split(".").map(Number);
    const current = { version: VERSION, packageUrl: `${server.url}/worker/${FILES.package}`, scriptUrl: `${server.url}/worker/${FILES.singleFile}` };
    expect((await welcomeFor("svc-worker", "0.0.0")).update).toEqual(current);
    expect((await welcomeFor("svc-worker", `${major}.${minor}.${patch}-rc.1`)).update).toEqual(current);
    // The same or newer, another client, or a version that is not semver: nothing to tell.
    for (const [client, version] of [
      ["svc-worker", VERSION],
      ["svc-worker", `${major}.${minor}.${patch + 1}`],
      ["another-worker", "0.0.1"],
      ["svc-worker", "dev"],
    ]) {
      expect((await welcomeFor(client, version)).update, `${client} ${version}`).toBeUndefined();
    }

    // A real worker that says it is older: the single file with its version written lower.
    const res = await server.fetch(`/worker/${FILES.singleFile}`);
    const source = await res.text();
    const stamped = `PACKAGE_VERSION = true ? ${JSON.stringify(VERSION)}`;
    expect(source.split(stamped)).toHaveLength(2);
    const old = path.join(tempDir("svc-old-"), "svc-worker-old.mjs");
    fs.writeFileSync(old, source.replace(stamped, `PACKAGE_VERSION = true ? "0.0.1"`));
    const version = spawnSync(process.execPath, [old, "--version"], { encoding: "utf8" });
    expect(version.stdout.trim()).toBe("0.0.1");
    const serving = start(new WorkerProcess(spawn(process.execPath, [old, "start"], { env: { ...userEnv(m.home), SVC_WORKER_HOME: m.home }, stdio: ["ignore", "pipe", "pipe"], detached: true }), m.home));
    await serving.waitFor(/✓ Connected/);
    const line = await serving.waitFor(/^! .*$/m);
    expect(line[0]).toBe(`! svc-worker ${VERSION} is available (this is 0.0.1): download ${current.scriptUrl} and run it with node. This one is still served.`);
  }, 120_000);
});

describe("the worker's files when they cannot be built", () => {
  it("a failed build answers 503 with Retry-After, and downloads meanwhile are refused without starting another build", async () => {
    const lines: string[] = [];
    const log = createLogger("info", new Writable({ write: (chunk, _enc, cb) => (lines.push(String(chunk)), cb()) }));
    // A file where the release folder should be: every build fails.
    const notADir = path.join(tempDir("svc-release-"), "file");
    fs.writeFileSync(notADir, "");
    const app = express();
    app.use(requestContext(log));
    app.use(workerDownloadsRouter(log, notADir).router);
    app.use(errorHandler());
    const server = await new Promise<http.Server>((resolve) => { const s = app.listen(0, "127.0.0.1", () => resolve(s)); });
    try {
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/worker/${FILES.package}`;
      for (let i = 0; i < 3; i++) {
        const res = await fetch(url);
        await expectError(res, 503, "service_unavailable");
        expect(res.headers.get("retry-after")).toBe("60");
      }
      expect(lines.filter((l) => l.includes("could not be built"))).toHaveLength(1);
    } finally {
      server.close();
    }
  });
});

