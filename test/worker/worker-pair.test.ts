import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { execFileSync, spawn } from "node:child_process";
import { spawnPair, spawnWorker, WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";

/**
 * `svc-worker pair` as an end user runs it: a real process against the real
 * server, the user's answer given through the session endpoints.
 */
describe("svc-worker pair", () => {
  let server: TestServer;
  const workers: WorkerProcess[] = [];
  const start = (w: WorkerProcess) => (workers.push(w), w);

  beforeAll(async () => {
    // The running clock lets the worker poll on real timers while tests jump ahead.
    server = await startTestServer({ kind: "pglite", dataDir: null }, { DEVICE_POLL_INTERVAL: "1" }, { runningClock: true });
  });
  afterEach(() => {
    for (const w of workers.splice(0)) w.stop();
  });
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  async function answer(decision: "approve" | "deny", userCode: string, user = "alice") {
    const s = await server.fetch("/v1/end_users/session", { method: "POST", headers: { "content-type": "application/json", ...bearer(server.dev.appKey) }, body: JSON.stringify({ user }) });
    const { session } = (await s.json()) as { session: string };
    const res = await server.fetch(`/v1/device/${decision}`, { method: "POST", headers: { "content-type": "application/json", ...bearer(session) }, body: JSON.stringify({ user_code: userCode }) });
    expect(res.status).toBe(200);
  }

  it("prints the code and where to enter it, then stores the token where only the user can read it", async () => {
    const w = start(spawnPair(server.url, server.dev.connectKey));
    const code = await w.userCode();
    expect(w.stdout).toContain("Local development app");
    expect(w.stdout).toContain(`${server.url}/connect`);
    expect(w.stdout).toMatch(/Waiting for approval/);
    await answer("approve", code);
    expect(await w.exited).toEqual({ code: 0, signal: null });
    expect(w.stdout).toMatch(/✓ Paired with Local development app as machine mch_/);

    const file = path.join(w.home, "credentials.json");
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.statSync(w.home).mode & 0o777).toBe(0o700);
    const creds = JSON.parse(fs.readFileSync(file, "utf8"));
    expect(creds).toMatchObject({ server: server.url, connectUrl: `${server.url.replace("http", "ws")}/v1/worker`, environment: "test" });
    expect(creds.pairingToken).toMatch(/^pt_svc_/);
    // The token is printed nowhere and kept out of the settings file.
    expect(w.stdout + w.stderr).not.toContain(creds.pairingToken);
    const settings = fs.readFileSync(path.join(w.home, "config.json"), "utf8");
    expect(JSON.parse(settings)).toEqual({ server: server.url, connectKey: server.dev.connectKey });
    expect(fs.statSync(path.join(w.home, "config.json")).mode & 0o777).toBe(0o600);

    // The machine is alice's: she approved it.
    const m = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: creds.machineId }, include: { endUser: true } });
    expect(m.endUser.externalId).toBe("alice");

    // The settings file stands in for the flags next time.
    const again = start(spawnWorker(["pair"], w.home));
    await again.userCode();
  });

  it("exits 1 saying so when the user denies", async () => {
    const w = start(spawnPair(server.url, server.dev.connectKey));
    await answer("deny", await w.userCode());
    expect((await w.exited).code).toBe(1);
    expect(w.stdout).toMatch(/denied in the browser\. Nothing was paired/);
    expect(fs.existsSync(path.join(w.home, "credentials.json"))).toBe(false);
  });

  it("exits 1 saying so when the code expires", async () => {
    const w = start(spawnPair(server.url, server.dev.connectKey));
    await w.userCode();
    server.clock.advance(901);
    expect((await w.exited).code).toBe(1);
    expect(w.stdout).toMatch(/code expired before it was approved\. Run the command again/);
  });

  it("honours slow_down: after being told, it polls at the widened interval for good", async () => {
    // A proxy in front of the server doubles the worker's first token poll, so the
    // server sees an early poll and answers slow_down; the worker gets that answer.
    const arrivals: number[] = [];
    const answers: string[] = [];
    let doubled = false;
    const forward = (req: http.IncomingMessage, body: Buffer) =>
      fetch(`${server.url}${req.url}`, { method: req.method, headers: { "content-type": "application/json" }, body: req.method === "POST" ? body.toString("utf8") : undefined });
    const proxy = http.createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = Buffer.concat(chunks);
      let answered = await forward(req, body);
      if (req.url!.endsWith("/device/token")) {
        arrivals.push(Date.now());
        if (!doubled) {
          doubled = true;
          answered = await forward(req, body);
        }
        const text = await answered.clone().text();
        answers.push(JSON.parse(text).error?.code ?? "token");
      }
      res.writeHead(answered.status, { "content-type": answered.headers.get("content-type") ?? "application/json" });
      res.end(Buffer.from(await answered.arrayBuffer()));
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    try {
      const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      const w = start(spawnPair(proxyUrl, server.dev.connectKey));
      const code = await w.userCode();
      // Let it poll a few times at the widened interval (1 + 5 seconds).
      while (arrivals.length < 3) await new Promise((r) => setTimeout(r, 100));
      await answer("approve", code);
      expect((await w.exited).code).toBe(0);
      expect(answers[0]).toBe("slow_down");
      // Never told twice: every later poll came at least 6 s after the one before.
      expect(answers.slice(1).filter((a) => a === "slow_down")).toEqual([]);
      for (let i = 1; i < arrivals.length; i++) expect(arrivals[i] - arrivals[i - 1]).toBeGreaterThanOrEqual(5_900);
    } finally {
      proxy.close();
    }
  }, 60_000);

  it("without a connect key or server: exit 2 naming what is missing; a wrong key: exit 1 saying it was refused", async () => {
    const bare = start(spawnWorker(["pair"]));
    expect((await bare.exited).code).toBe(2);
    expect(bare.stderr).toMatch(/needs --connect-key and --server/);

    const wrong = start(spawnPair(server.url, `pk_svc_${"0".repeat(24)}`));
    expect((await wrong.exited).code).toBe(1);
    expect(wrong.stdout).toMatch(/connect key was refused \(invalid_credential\)/);

    const badUrl = start(spawnWorker(["pair", "--connect-key", server.dev.connectKey, "--server", "ftp://x"]));
    expect((await badUrl.exited).code).not.toBe(0);
    expect(badUrl.stderr).toMatch(/must be an http\(s\) URL/);
  });

  it("Ctrl-C while waiting stops cleanly: nothing paired, exit 130", async () => {
    const w = start(spawnPair(server.url, server.dev.connectKey));
    await w.userCode();
    process.kill(w.child.pid!, "SIGINT");
    const exit = await w.exited;
    expect(exit.code ?? exit.signal).toBe(130);
    expect(w.stdout).toMatch(/nothing was paired/);
  });
});

describe("the svc-worker package", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, { DEVICE_POLL_INTERVAL: "1" }, { runningClock: true });
  });
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  it("packs, installs into an empty project and pairs from there with npx", async () => {
    const dir = tempDir("svc-worker-pack-");
    const run = (cmd: string, args: string[], cwd: string) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    for (const pkg of ["contract", "worker"]) run("npm", ["pack", "--pack-destination", dir], path.join(ROOT, pkg));
    const project = path.join(dir, "project");
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "empty", version: "1.0.0", private: true }));
    const tarballs = fs.readdirSync(dir).filter((f) => f.endsWith(".tgz")).map((f) => path.join(dir, f));
    run("npm", ["install", "--no-audit", "--no-fund", ...tarballs], project);
    // The packed package runs its compiled code: no sources, no tsx.
    expect(fs.existsSync(path.join(project, "node_modules/svc-worker/src"))).toBe(false);

    const home = tempDir("svc-worker-home-");
    const child = spawn("npx", ["svc-worker", "pair", "--connect-key", server.dev.connectKey, "--server", server.url], {
      cwd: project,
      env: { ...process.env, SVC_WORKER_HOME: home },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const w = new WorkerProcess(child, home);
    try {
      const code = await w.userCode();
      const s = await server.fetch("/v1/end_users/session", { method: "POST", headers: { "content-type": "application/json", ...bearer(server.dev.appKey) }, body: JSON.stringify({ user: "frank" }) });
      const { session } = (await s.json()) as { session: string };
      const ok = await server.fetch("/v1/device/approve", { method: "POST", headers: { "content-type": "application/json", ...bearer(session) }, body: JSON.stringify({ user_code: code }) });
      expect(ok.status).toBe(200);
      expect((await w.exited).code).toBe(0);
      expect(JSON.parse(fs.readFileSync(path.join(home, "credentials.json"), "utf8")).pairingToken).toMatch(/^pt_svc_/);
    } finally {
      w.stop();
      for (const pkg of ["contract", "worker"]) fs.rmSync(path.join(ROOT, pkg, "dist"), { recursive: true, force: true });
    }
  }, 180_000);
});
