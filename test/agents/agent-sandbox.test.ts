import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startToolBridge } from "../../worker/src/mcp/bridge-host.js";
import { machinePolicy } from "../../worker/src/policy/index.js";
import { detectSandbox, launchAgent } from "../../worker/src/policy/sandbox.js";
import { seatbeltProfile } from "../../worker/src/policy/sandbox-macos.js";
import { Policy } from "../../worker/src/policy/schema.js";
import type { AgentProcess, Launched } from "../../worker/src/runtimes/runtime.js";
import { pollUntil, removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { CLAUDE_BIN, CODEX_BIN } from "../../scripts/test-tools.mjs";

/**
 * The operating-system sandbox around agent CLIs, with real bubblewrap and real
 * processes: a shell started the way a runtime starts its CLI (through the
 * machine policy's `launch`) tries to read, write and connect where it should
 * not. The real Claude Code and Codex start inside it, and Claude Code runs a
 * prompt against a loopback stand-in with the network off.
 */

/** Bubblewrap here; CI (SVC_TEST_SANDBOX=1) installs it and requires these tests, a machine without it skips them. */
const linux = (process.platform === "linux" && detectSandbox().kind === "bubblewrap") || process.env.SVC_TEST_SANDBOX === "1";

/** A tiny HTTP server on 127.0.0.1 answering every request with `name`. */
async function httpServer(name: string, host = "127.0.0.1"): Promise<{ server: http.Server; port: number; url: string }> {
  const server = http.createServer((_req, res) => res.end(name));
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as { port: number }).port;
  return { server, port, url: `http://${host}:${port}` };
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a launched process to its end (asynchronously: the worker's side of the network must keep serving) and cleans up. */
async function run(launched: Launched): Promise<Ran> {
  const child = spawn(launched.command, launched.args, { cwd: launched.cwd, env: launched.env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c) => (stdout += c));
  child.stderr.on("data", (c) => (stderr += c));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  await launched.cleanup?.();
  return { code, stdout, stderr };
}

describe.runIf(linux)("agent CLIs inside bubblewrap", () => {
  let home: string;
  let work: string;
  let outside: string;
  let workerEnv: NodeJS.ProcessEnv;
  let model: Awaited<ReturnType<typeof httpServer>>;
  let other: Awaited<ReturnType<typeof httpServer>>;

  /** Launches `bash -c script` as a runtime would launch its CLI, under the given policy. */
  const launchShell = (script: string, policy: Record<string, unknown> = {}, more: Partial<AgentProcess> = {}) =>
    machinePolicy(Policy.parse(policy), workerEnv).launch({ command: "bash", args: ["-c", script], cwd: work, env: {}, modelApis: [model.url], ...more });
  const shell = async (script: string, policy: Record<string, unknown> = {}, more: Partial<AgentProcess> = {}) => run(await launchShell(script, policy, more));

  beforeAll(async () => {
    // The user's HOME, with a key beside the working folder; the worker's environment carries secrets.
    home = tempDir("svc-sandbox-home-");
    fs.mkdirSync(path.join(home, ".ssh"));
    fs.writeFileSync(path.join(home, ".ssh", "id_rsa"), "PRIVATE KEY\n");
    work = path.join(home, "project");
    fs.mkdirSync(work);
    fs.writeFileSync(path.join(work, "notes.txt"), "in the working folder\n");
    outside = tempDir("svc-sandbox-outside-");
    fs.writeFileSync(path.join(outside, "secret.txt"), "OUTSIDE SECRET\n");
    workerEnv = { PATH: process.env.PATH, HOME: home, LANG: "C.UTF-8", AWS_SECRET_ACCESS_KEY: "aws-secret", ANTHROPIC_API_KEY: "sk-ant-worker", SOME_SETTING: "visible" };
    model = await httpServer("model api");
    other = await httpServer("another service");
  });
  afterAll(() => {
    model?.server.close();
    other?.server.close();
    removeTempDirs();
  });

  it("reads and writes the working folder, and nothing of the user's outside it", async () => {
    const r = await shell(
      [
        "cat notes.txt",
        "echo written > made.txt",
        `cat ~/.ssh/id_rsa || echo no-ssh-key`,
        `cat ${outside}/secret.txt || echo no-outside-file`,
        `cat ${ROOT}/package.json || echo no-repository`,
        "for d in /home /root /var /srv /mnt /run/user; do [ -e $d ] && echo $d is there; done; echo none-of-the-rest",
        `echo escaped > ${outside}/escape.txt || echo no-write-outside`,
        "echo escaped > ~/escape.txt && echo home-tmpfs-write",
        "echo escaped > /tmp/escape.txt && echo tmp-write",
        "touch /usr/escape.txt || echo no-write-system",
        "grep -q 'CapEff:.0000000000000000' /proc/self/status && echo no-capabilities",
        // Node 24 names its main thread (the process's comm) "MainThread"; Node 20 left it "node".
        "ps -e -o comm= > /tmp/ps.txt; sed 's/^MainThread$/node/' /tmp/ps.txt | sort | tr '\\n' ' '; echo",
      ].join("\n"),
    );
    expect(r.code).toBe(0);
    expect(r.stdout.split("\n")).toEqual([
      "in the working folder",
      "no-ssh-key",
      "no-outside-file",
      "no-repository",
      "none-of-the-rest",
      "no-write-outside",
      "home-tmpfs-write",
      "tmp-write",
      "no-write-system",
      "no-capabilities",
      // Only its own processes: the shell, bubblewrap's init, the forwarder and ps.
      "bash bwrap node ps ",
      "",
    ]);
    expect(r.stderr).not.toMatch(/PRIVATE KEY|OUTSIDE SECRET/);
    expect(fs.readFileSync(path.join(work, "made.txt"), "utf8")).toBe("written\n");
    // HOME and /tmp inside are empty and private: nothing written there reaches the host's.
    expect(fs.existsSync(path.join(outside, "escape.txt"))).toBe(false);
    expect(fs.existsSync(path.join(home, "escape.txt"))).toBe(false);
    expect(fs.existsSync("/tmp/escape.txt")).toBe(false);
  });

  it("mounts back only what the runtime and the user list: readable read-only, writable read-write", async () => {
    const state = path.join(home, ".cli-state");
    const shared = path.join(home, "shared");
    fs.mkdirSync(state);
    fs.mkdirSync(shared);
    fs.writeFileSync(path.join(shared, "doc.txt"), "shared doc\n");
    const locked = path.join(state, "locked");
    fs.mkdirSync(locked);
    const r = await shell(
      `echo s > ${state}/s.txt && cat ${shared}/doc.txt && (echo x > ${shared}/x.txt || echo read-only) && (echo x > ${locked}/x.txt || echo nested-read-only) && ls ~/.ssh || echo no-ssh`,
      { sandbox: { readable: [shared, locked] } },
      { writable: [state] },
    );
    // The most specific path wins: a readable folder inside a writable one stays read-only.
    expect(r.stdout).toBe("shared doc\nread-only\nnested-read-only\nno-ssh\n");
    expect(fs.readFileSync(path.join(state, "s.txt"), "utf8")).toBe("s\n");
  });

  it("mounts a CLI's installation read-only, unless it lies in the working folder (the project's own node_modules stay writable)", async () => {
    const install = (root: string) => {
      const bin = path.join(root, "node_modules", "some-cli", "bin");
      fs.mkdirSync(bin, { recursive: true });
      fs.writeFileSync(path.join(bin, "cli"), `#!/bin/bash\necho x > "$(dirname "$0")/touched" 2>/dev/null && echo writable || echo read-only\n`, { mode: 0o755 });
      return path.join(bin, "cli");
    };
    const run1 = async (command: string) => (await run(await machinePolicy(Policy.parse({}), workerEnv).launch({ command, args: [], cwd: work, env: {} }))).stdout;
    expect(await run1(install(outside))).toBe("read-only\n");
    expect(await run1(install(work))).toBe("writable\n");
  });

  it("lets through only the allowed environment", async () => {
    const script = "echo AWS=${AWS_SECRET_ACCESS_KEY:-none} KEY=${ANTHROPIC_API_KEY:-none} SETTING=${SOME_SETTING:-none} OWN=${OWN:-none} HOME=$HOME";
    expect((await shell(script, {}, { env: { OWN: "runtime" } })).stdout).toBe(`AWS=none KEY=none SETTING=none OWN=runtime HOME=${home}\n`);
    expect((await shell(script, { env: ["SOME_SETTING"], providerKeys: ["ANTHROPIC_API_KEY"] })).stdout).toBe(`AWS=none KEY=sk-ant-worker SETTING=visible OWN=none HOME=${home}\n`);
  });

  /** Node inside the sandbox fetching a URL: prints the body or `unreachable`. */
  const fetchScript = (url: string) => `${process.execPath} -e 'fetch("${url}").then(r => r.text()).then(t => console.log(t), () => console.log("unreachable"))'`;

  it("with the network off reaches its model API on loopback and nothing else; with it on, both", async () => {
    const off = await shell(`${fetchScript(model.url)}; ${fetchScript(other.url)}`);
    expect(off.stdout).toBe("model api\nunreachable\n");
    const on = await shell(`${fetchScript(model.url)}; ${fetchScript(other.url)}`, { sandbox: { network: true } });
    expect(on.stdout).toBe("model api\nanother service\n");
    // No model API at all: nothing reachable.
    expect((await shell(fetchScript(model.url), {}, { modelApis: [] })).stdout).toBe("unreachable\n");
  });

  const lanAddress = Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a && a.family === "IPv4" && !a.internal)?.address;

  it.runIf(lanAddress && commandWorks("curl", ["--version"]))("with the network off reaches a remote model API only through the worker's proxy (plain http and CONNECT)", async () => {
    // A "remote" API: this machine's own non-loopback address, which the sandbox's empty network cannot reach directly.
    const remote = await httpServer("remote model api", "0.0.0.0");
    const elsewhere = await httpServer("remote elsewhere", "0.0.0.0");
    try {
      const api = `http://${lanAddress}:${remote.port}`;
      const deny = `http://${lanAddress}:${elsewhere.port}`;
      const fetchVia = (flags: string, url: string) => `curl -sS -m 5 ${flags} ${url}; echo`;
      const statusVia = (flags: string, url: string) => `curl -s -m 5 ${flags} -o /dev/null -w '%{http_code}\\n' ${url}`;
      const r = await shell(
        [fetchVia("", api), fetchVia("--proxytunnel", api), statusVia("", deny), statusVia("--proxytunnel", deny), `curl -sS -m 5 --noproxy '*' ${api} || echo no-direct-route`].join("\n"),
        {},
        { modelApis: [api] },
      );
      // Plain http through the proxy, then CONNECT; the other service: 403 for both (curl reports a refused tunnel as 000).
      expect(r.stdout).toBe("remote model api\nremote model api\n403\n000\nno-direct-route\n");
    } finally {
      remote.server.close();
      elsewhere.server.close();
    }
  });

  /** Processes named by the marker (their argv[0], seen through the host's /proc). */
  const running = (marker: string) =>
    fs.readdirSync("/proc").filter((pid) => {
      try {
        return /^\d+$/.test(pid) && fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith(`${marker}\0`);
      } catch {
        return false;
      }
    });

  it("leaves nothing running when the job is cancelled or the worker dies", async () => {
    // Cancel: the runtime kills what it spawned (SIGTERM), as runNdjson does.
    const marker = `svc-marker-${process.pid}-cancel`;
    const launched = await launchShell('(exec -a "$MARK" sleep 300) & (exec -a "$MARK" sleep 300) & wait', {}, { env: { MARK: marker } });
    const child = spawn(launched.command, launched.args, { cwd: launched.cwd, env: launched.env, stdio: "ignore" });
    await pollUntil(async () => running(marker).length, (n) => n === 2, 10_000, "both sleeps running");
    child.kill("SIGTERM");
    await pollUntil(async () => running(marker), (left) => left.length === 0, 10_000, "nothing left after cancel");
    await launched.cleanup?.();

    // The worker itself dies (SIGKILL, no chance to clean up): --die-with-parent.
    const dying = `svc-marker-${process.pid}-parent`;
    const inner = await launchShell('(exec -a "$MARK" sleep 300) & wait', {}, { env: { MARK: dying } });
    const parent = spawn(process.execPath, ["-e", `require("child_process").spawn(${JSON.stringify(inner.command)}, ${JSON.stringify(inner.args)}, { stdio: "ignore", cwd: ${JSON.stringify(inner.cwd)}, env: ${JSON.stringify(inner.env)} }); setInterval(() => {}, 1000)`], { stdio: "ignore" });
    await pollUntil(async () => running(dying).length, (n) => n === 1, 10_000, "the sleep running");
    parent.kill("SIGKILL");
    await pollUntil(async () => running(dying), (left) => left.length === 0, 10_000, "nothing left after the worker died");
  });

  it("refuses HOME itself as the working folder", async () => {
    await expect(shell("true", {}, { cwd: home })).rejects.toThrow(/is HOME or holds it/);
    await expect(shell("true", {}, { cwd: "/" })).rejects.toThrow(/is HOME or holds it/);
  });

  it("refuses to start a CLI unconfined unless the user accepted it", async () => {
    const none = { kind: null, why: "no sandbox here" } as const;
    const p: AgentProcess = { command: "bash", args: ["-c", "echo ran"], cwd: work, env: {} };
    await expect(launchAgent(p, Policy.parse({}), workerEnv, none)).rejects.toThrow(/only inside a sandbox.*no sandbox here.*sandbox\.required/);
    const unconfined = await launchAgent(p, Policy.parse({ sandbox: { required: false } }), { HOME: home }, none);
    expect(unconfined).toEqual({ command: "bash", args: ["-c", "echo ran"], cwd: work, env: { HOME: home } });
  });

  it("runs the app's MCP tool bridge inside, with what the bridge says it needs mounted", async () => {
    const bridge = await startToolBridge([{ name: "lookup_order", description: "Finds an order." }], async (call) => ({ output: `order for ${call.arguments}`, isError: false }));
    const launched = await machinePolicy(Policy.parse({}), workerEnv).launch({
      command: bridge.server.command,
      args: bridge.server.args,
      cwd: work,
      env: bridge.server.env,
      readable: bridge.readable,
      writable: bridge.writable,
      modelApis: [model.url],
    });
    const client = new Client({ name: "sandboxed-cli", version: "1.0.0" });
    try {
      await client.connect(new StdioClientTransport({ command: launched.command, args: launched.args, cwd: launched.cwd, env: launched.env as Record<string, string>, stderr: "pipe" }));
      expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["lookup_order"]);
      expect(await client.callTool({ name: "lookup_order", arguments: { id: "o_1" } })).toMatchObject({ content: [{ type: "text", text: 'order for {"id":"o_1"}' }], isError: false });
    } finally {
      await client.close();
      await launched.cleanup?.();
      await bridge.close();
    }
  });

  const claude = CLAUDE_BIN;
  const codex = CODEX_BIN;

  it("starts the real Claude Code and Codex inside", async () => {
    for (const [cli, version] of [
      [claude, /^2\.1\.197 \(Claude Code\)/],
      [codex, /codex-cli 0\.169\.0/],
    ] as const) {
      const r = await run(await machinePolicy(Policy.parse({}), workerEnv).launch({ command: cli, args: ["--version"], cwd: work, env: {}, modelApis: [model.url] }));
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(version);
    }
  });

  it("runs a real Claude Code prompt against its loopback model API with the network off", async () => {
    const api = await anthropicStandIn("Hello from the stand-in.");
    try {
      const env = { ANTHROPIC_BASE_URL: api.url, ANTHROPIC_API_KEY: "sk-test", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_AUTOUPDATER: "1", DISABLE_TELEMETRY: "1", DISABLE_ERROR_REPORTING: "1" };
      const r = await run(await machinePolicy(Policy.parse({}), workerEnv).launch({ command: claude, args: ["-p", "say hello", "--output-format", "json"], cwd: work, env, modelApis: [api.url] }));
      expect(JSON.parse(r.stdout)).toMatchObject({ type: "result", is_error: false, result: "Hello from the stand-in." });
      expect(api.requests).toContain("POST /v1/messages?beta=true");
    } finally {
      api.server.close();
    }
  });

  it.runIf(lanAddress && commandWorks("openssl", ["version"]))("runs a real Claude Code prompt against a remote https model API through the CONNECT proxy with the network off", async () => {
    // The stand-in's certificate, for this machine's non-loopback address; Claude Code trusts it through NODE_EXTRA_CA_CERTS.
    const dir = tempDir("svc-sandbox-tls-");
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", `${dir}/key.pem`, "-out", `${dir}/cert.pem`, "-days", "1", "-subj", "/CN=standin", "-addext", `subjectAltName=IP:${lanAddress}`], { stdio: "ignore" });
    const api = await anthropicStandIn("Hello over TLS.", { host: lanAddress!, key: fs.readFileSync(`${dir}/key.pem`, "utf8"), cert: fs.readFileSync(`${dir}/cert.pem`, "utf8") });
    try {
      const env = { ANTHROPIC_BASE_URL: api.url, ANTHROPIC_API_KEY: "sk-test", NODE_EXTRA_CA_CERTS: `${dir}/cert.pem`, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_AUTOUPDATER: "1", DISABLE_TELEMETRY: "1", DISABLE_ERROR_REPORTING: "1" };
      const r = await run(await machinePolicy(Policy.parse({}), workerEnv).launch({ command: claude, args: ["-p", "say hello", "--output-format", "json"], cwd: work, env, readable: [dir], modelApis: [api.url] }));
      expect(JSON.parse(r.stdout)).toMatchObject({ type: "result", is_error: false, result: "Hello over TLS." });
      expect(api.requests).toContain("POST /v1/messages?beta=true");
    } finally {
      api.server.close();
    }
  });
});

function commandWorks(command: string, args: string[]): boolean {
  try {
    execFileSync(command, args, { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/**
 * The smallest Anthropic Messages API stand-in Claude Code runs a prompt against: one streamed text answer.
 * On 127.0.0.1, or with `tls` on another address over https.
 */
async function anthropicStandIn(text: string, tls?: { host: string; key: string; cert: string }): Promise<{ server: http.Server; url: string; requests: string[] }> {
  const requests: string[] = [];
  const handler: http.RequestListener = async (req, res) => {
    requests.push(`${req.method} ${req.url}`);
    for await (const _ of req);
    if (req.method !== "POST") return void res.end();
    res.writeHead(200, { "content-type": "text/event-stream" });
    const send = (event: string, data: object) => res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
    send("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } });
    send("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
    send("content_block_delta", { index: 0, delta: { type: "text_delta", text } });
    send("content_block_stop", { index: 0 });
    send("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } });
    send("message_stop", {});
    res.end();
  };
  const server = tls ? https.createServer({ key: tls.key, cert: tls.cert }, handler) : http.createServer(handler);
  const host = tls?.host ?? "127.0.0.1";
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, url: `${tls ? "https" : "http"}://${host}:${(server.address() as { port: number }).port}`, requests };
}

describe("the Seatbelt profile (macOS)", () => {
  const profile = seatbeltProfile({
    cwd: "/Users/ann/project",
    readable: ["/opt/homebrew/lib/node_modules", "/Users/ann/.nvm/versions/node/v20.19.0"],
    writable: ["/Users/ann/.claude", "/private/var/folders/xy/T/svc-agent-1"],
    hidden: ["/Users", "/Volumes", "/private/tmp", "/private/var/folders", "/Users/ann"],
    ports: [11434, 53001],
  });

  it("hides the users' files except the working folder and the listed paths", () => {
    expect(profile).toContain('(deny file-read-data file-read-xattr (subpath "/Users") (subpath "/Volumes") (subpath "/private/tmp") (subpath "/private/var/folders") (subpath "/Users/ann"))');
    expect(profile).toContain(
      '(allow file-read-data file-read-xattr (subpath "/Users/ann/project") (subpath "/Users/ann/.claude") (subpath "/private/var/folders/xy/T/svc-agent-1") (subpath "/opt/homebrew/lib/node_modules") (subpath "/Users/ann/.nvm/versions/node/v20.19.0"))',
    );
  });

  it("lets it write only the working folder, the writable paths and the terminal devices", () => {
    expect(profile).toContain("(deny file-write*)");
    expect(profile).toContain('(allow file-write* (subpath "/Users/ann/project") (subpath "/Users/ann/.claude") (subpath "/private/var/folders/xy/T/svc-agent-1") (literal "/dev/null") (literal "/dev/tty") (subpath "/dev/fd"))');
    // Readable is not writable.
    expect(profile).not.toMatch(/allow file-write\*[^\n]*homebrew/);
  });

  it("with the network off connects only to the model API ports on loopback and the writable folders' sockets", () => {
    expect(profile).toContain("(deny network*)");
    expect(profile).toContain('(allow network-outbound (remote ip "localhost:11434") (remote ip "localhost:53001") (remote unix-socket (subpath "/Users/ann/project") (subpath "/Users/ann/.claude") (subpath "/private/var/folders/xy/T/svc-agent-1")))');
    // Rules are applied in order, the last match winning: each allow comes after its deny.
    const lines = profile.split("\n");
    expect(lines.findIndex((l) => l.startsWith("(allow network"))).toBeGreaterThan(lines.indexOf("(deny network*)"));
    expect(lines.findIndex((l) => l.startsWith("(allow file-write*"))).toBeGreaterThan(lines.indexOf("(deny file-write*)"));
  });

  it("with the network on adds no network rule; quotes paths", () => {
    const open = seatbeltProfile({ cwd: '/Users/a "b"\\c', readable: [], writable: [], hidden: ["/Users"], ports: null });
    expect(open).not.toMatch(/network/);
    expect(open).toContain('(subpath "/Users/a \\"b\\"\\\\c")');
  });
});
