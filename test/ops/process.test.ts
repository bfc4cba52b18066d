import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import net from "node:net";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../server/db/open.js";
import { DataDirLockedError, lockDataDir, processStarted } from "../../server/data-dir-lock.js";

const pidNs = fs.readlinkSync("/proc/self/ns/pid");
import { SessionService } from "../../server/sessions/sessions.js";
import { systemClock } from "../../server/clock.js";
import { bearer, expectAccepted, expectError } from "../helpers/requests.js";
import { jsonOf, removeTempDirs, runCli, runServerToExit, spawnServer, startServerProcess, stopAll, tempDir, until, type ServerProcess } from "../helpers/process.js";
import { migratedTempDir } from "../helpers/migrated-folder.js";

/**
 * The server as it runs in production: `node server/main.ts` in a child process,
 * on a data folder of its own. What it prints, what it logs, what it stores, how
 * it stops and how it refuses to start.
 */

const APP_KEY = /^sk_svc_[a-z0-9]{16}\.[A-Za-z0-9_-]{43}$/;
const CONNECT_KEY = /^pk_svc_[a-z0-9]{24}$/;

const secretOf = (appKey: string) => appKey.slice(appKey.indexOf(".") + 1);
/** The credential was taken: `GET /v1/plans` answers 200... */
const passes = expectAccepted;
/** ...and a built one answers. */
const ok = async (res: Response) => expect(res.status, await res.text()).toBe(200);

afterEach(async () => {
  await stopAll();
});

afterAll(() => {
  removeTempDirs();
});

describe("first start and restart on the same data folder", () => {
  it("prints the dev-app banner once; after a restart the data is still there and the key still works", async () => {
    const dir = tempDir("svc-process-");
    const first = await startServerProcess(dir);
    const dev = first.banner();
    expect(dev, first.output()).not.toBeNull();
    expect(dev!.baseUrl).toBe(`${first.url}/v1`);
    expect(dev!.appId).toMatch(/^app_[a-z0-9]+$/);
    expect(dev!.environment).toBe("test");
    expect(dev!.appKey).toMatch(APP_KEY);
    expect(dev!.connectKey).toMatch(CONNECT_KEY);
    // Printed once, on stdout, as one block: each key on its line and on its `export` line (the three the README's quick start pastes).
    const stdout = first.text("stdout");
    expect(stdout.split(dev!.appKey)).toHaveLength(3);
    expect(stdout).toContain(`export SVC_API_KEY=${dev!.appKey}\n`);
    expect(stdout.split(dev!.connectKey)).toHaveLength(3);
    expect(stdout).toContain(`export SVC_CONNECT_KEY=${dev!.connectKey}\n`);
    expect(first.text("stderr")).toBe("");
    await passes(await first.fetch("/v1/plans", { headers: bearer(dev!.appKey) }));

    const stopped = await first.stop("SIGTERM");
    expect(stopped, first.output()).toEqual({ code: 0, signal: null });
    expect(first.logs().some((l) => l.msg === "stopping" && l.signal === "SIGTERM")).toBe(true);

    const second = await startServerProcess(dir);
    expect(second.banner(), second.output()).toBeNull();
    expect(second.bannerLines(), second.output()).toEqual([]);
    // No migrations to apply the second time: the database persisted.
    expect(second.logs().some((l) => l.msg === "migrations applied")).toBe(false);
    await passes(await second.fetch("/v1/plans", { headers: bearer(dev!.appKey) }));
    await ok(
      await second.fetch(`/c/${dev!.connectKey}/v1/device/code`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ hostname: "h", platform: "linux", arch: "x64", client: "t" }),
      }),
    );
    expect(await second.stop()).toEqual({ code: 0, signal: null });
  }, 180_000); // two cold starts of the real process (migrations on an empty folder): 51 s seen on a loaded CI machine
});

describe("secrets", () => {
  // Shared by the two tests below: the folder, the dev app key, a real session token.
  const dir = migratedTempDir("svc-secrets-");
  let appKey = "";
  let sessionToken = "";
  const runs: ServerProcess[] = [];

  it("are never logged: no output line but the banner holds the app key's secret or a session token", async () => {
    const first = await startServerProcess(dir);
    runs.push(first);
    const dev = first.banner()!;
    expect(dev, first.output()).not.toBeNull();
    appKey = dev.appKey;
    const [, id] = /^sk_svc_([a-z0-9]+)\./.exec(appKey)!;
    const wrongSecret = `sk_svc_${id}.${"B".repeat(43)}`;

    await passes(await first.fetch("/v1/plans", { headers: bearer(appKey) }));
    // The key in the query string and in a body: only the path is logged.
    await passes(await first.fetch(`/v1/plans?key=${encodeURIComponent(appKey)}`, { headers: bearer(appKey) }));
    await ok(
      await first.fetch("/v1/end_users/session", {
        method: "POST",
        headers: { ...bearer(appKey), "content-type": "application/json" },
        body: JSON.stringify({ user: "u1", note: appKey }),
      }),
    );
    await expectError(await first.fetch("/v1/plans", { headers: bearer(wrongSecret) }), 401, "invalid_credential");
    await expectError(await first.fetch("/v1/plans", { headers: bearer(`${appKey}x`) }), 401, "invalid_credential");
    await expectError(await first.fetch("/v1/plans", { headers: { authorization: `Basic ${Buffer.from(`u:${appKey}`).toString("base64")}` } }), 401, "invalid_credential");
    await expectError(await first.fetch("/v1/connect", { headers: bearer(appKey) }), 401, "wrong_credential_kind");
    await expectError(await first.fetch("/v1/models", { headers: bearer(dev.connectKey) }), 401, "wrong_credential_kind");
    expect(await first.stop()).toEqual({ code: 0, signal: null });

    // A real session token: minted on the folder while no server holds it (the
    // route that mints them is not built yet), then used against the server.
    const release = await lockDataDir(dir, () => {});
    const db = await openDatabase({ kind: "pglite", dataDir: path.join(dir, "pglite") });
    try {
      const tenant = { appId: dev.appId, environment: "test" as const };
      sessionToken = (await new SessionService(db.prisma, systemClock).mint(tenant, "u1")).token;
    } finally {
      await db.close();
      await release();
    }

    const second = await startServerProcess(dir);
    runs.push(second);
    await ok(await second.fetch("/v1/connect", { headers: bearer(sessionToken) }));
    await ok(await second.fetch("/v1/machines", { headers: bearer(sessionToken) }));
    await expectError(await second.fetch("/v1/plans", { headers: bearer(sessionToken) }), 401, "wrong_credential_kind");
    await expectError(await second.fetch("/v1/connect", { headers: bearer(`est_${"C".repeat(43)}`) }), 401, "invalid_credential");
    await expectError(await second.fetch("/v1/connect", { headers: bearer(appKey) }), 401, "wrong_credential_kind");
    await passes(await second.fetch("/v1/plans", { headers: bearer(appKey) }));
    await until(() => second.logs().filter((l) => l.msg === "request").length >= 6);
    expect(await second.stop()).toEqual({ code: 0, signal: null });

    const secret = secretOf(appKey);
    const banner = first.bannerLines();
    expect(banner.join("\n")).toContain(appKey);
    expect(second.bannerLines()).toEqual([]);
    const lines = runs.flatMap((r) => r.lines);
    const others = lines.filter((l) => !(l.stream === "stdout" && banner.includes(l.text)));
    expect(others.length).toBeGreaterThan(10);
    for (const { stream, text } of others) {
      const where = `${stream}: ${text}`;
      expect(text, where).not.toContain(secret);
      expect(text, where).not.toContain("B".repeat(43));
      expect(text, where).not.toContain(sessionToken);
      expect(text, where).not.toContain(sessionToken.slice("est_".length));
      expect(text, where).not.toContain("C".repeat(43));
      expect(text, where).not.toMatch(/est_[A-Za-z0-9_-]{43}/);
      // Outside the banner, every line is a structured log line.
      expect(stream, where).toBe("stdout");
      expect(() => JSON.parse(text), where).not.toThrow();
    }

    const requests = runs.flatMap((r) => r.logs()).filter((l) => l.msg === "request");
    expect(requests.length).toBe(14);
    for (const r of requests) {
      expect(r.requestId, JSON.stringify(r)).toMatch(/^req_/);
      expect(typeof r.path).toBe("string");
      expect(typeof r.status).toBe("number");
      expect(JSON.stringify(r)).not.toMatch(/authorization/i);
      expect(r).not.toHaveProperty("headers");
    }
    expect(requests.map((r) => r.path)).toContain("/v1/plans");
    expect(requests.some((r) => String(r.path).includes("?"))).toBe(false);
  });

  it("are not stored in clear: no text column of any table holds the app key's secret or the session token", async () => {
    expect(appKey, "the previous test made the key").toMatch(APP_KEY);
    expect(sessionToken, "the previous test made the session").toMatch(/^est_/);
    expect(runs.every((r) => !r.running)).toBe(true);
    const secret = secretOf(appKey);
    const release = await lockDataDir(dir, () => {});
    const db = await openDatabase({ kind: "pglite", dataDir: path.join(dir, "pglite") });
    try {
      const columns = await db.query<{ table_name: string; column_name: string }>(
        `SELECT table_name, column_name FROM information_schema.columns
          WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'json', 'jsonb')
          ORDER BY table_name, column_name`,
      );
      expect(columns.map((c) => `${c.table_name}.${c.column_name}`)).toContain("app_keys.secret_hash");
      let values = 0;
      for (const { table_name, column_name } of columns) {
        const rows = await db.query<{ v: string | null }>(`SELECT "${column_name}"::text AS v FROM "${table_name}"`);
        for (const { v } of rows) {
          if (v === null) continue;
          values++;
          const where = `${table_name}.${column_name} = ${v}`;
          expect(v, where).not.toContain(secret);
          expect(v, where).not.toContain(sessionToken);
          expect(v, where).not.toContain(sessionToken.slice("est_".length));
        }
      }
      expect(values).toBeGreaterThan(5);
      // The scan did read the key's row: its display hint (id and the secret's first characters) is there.
      const [hint] = await db.query<{ hint: string }>(`SELECT hint FROM app_keys`);
      expect(hint.hint.startsWith(`${appKey.slice(0, appKey.indexOf(".") + 1)}${secret.slice(0, 4)}`)).toBe(true);

      const [id] = /^sk_svc_([a-z0-9]+)\./.exec(appKey)!.slice(1);
      const keys = await db.query<{ id: string; secret_hash: string }>(`SELECT id, secret_hash FROM app_keys`);
      expect(keys.map((k) => k.id)).toEqual([id]);
      for (const k of keys) expect(k.secret_hash).toMatch(/^[0-9a-f]{64}$/);
    } finally {
      await db.close();
      await release();
    }
  });
});

describe("a first start that fails", () => {
  let holder: net.Server | null = null;

  afterEach(async () => {
    await new Promise<void>((resolve) => (holder ? holder.close(() => resolve()) : resolve()));
    holder = null;
  });

  it("on a port in use exits 1, and the next start on the same folder still shows the dev app's keys", async () => {
    holder = net.createServer();
    await new Promise<void>((resolve) => holder!.listen(0, "127.0.0.1", () => resolve()));
    const port = (holder.address() as net.AddressInfo).port;
    const dir = migratedTempDir("svc-port-busy-");
    const failed = await runServerToExit(dir, { PORT: String(port) });
    expect(failed.code, failed.server.output()).toBe(1);
    expect(failed.server.output()).toMatch(/EADDRINUSE/);
    expect(failed.server.banner()).toBeNull();

    // No dev-app key was ever shown. The first start that serves must show one
    // (the key is stored hashed: a banner missed now is a key lost for good).
    const next = await startServerProcess(dir);
    const dev = next.banner();
    expect(dev, `no dev-app banner after a failed first start:\n${next.output()}`).not.toBeNull();
    await passes(await next.fetch("/v1/plans", { headers: bearer(dev!.appKey) }));
    // Two starts of the built server, one to its failure: 15 s alone, past 30 s beside the heaviest suites.
  }, 90_000);
});

describe("a data folder with a long path", () => {
  it("either serves (the CLI reaching it) or refuses clearly; never a half-made socket file", async () => {
    // <dir>/admin.sock over 107 bytes: longer than a Unix socket path may be (sun_path).
    const base = tempDir("svc-long-");
    const dir = path.join(base, "d".repeat(Math.max(1, 100 - base.length - 1)));
    expect(path.join(dir, "admin.sock").length).toBeGreaterThan(107);
    const server = spawnServer(dir);
    await until(() => !server.running || server.logs().some((l) => l.msg === "listening"), 45_000);
    if (server.running) {
      server.url = String(server.logs().find((l) => l.msg === "listening")!.url);
      const dev = server.banner()!;
      await passes(await server.fetch("/v1/plans", { headers: bearer(dev.appKey) }));
      const apps = jsonOf<{ appId: string }[]>(await runCli(["apps", "list", "--json"], { SVC_DATA_DIR: dir }));
      expect(apps.map((a) => a.appId)).toEqual([dev.appId]);
      expect(await server.stop()).toEqual({ code: 0, signal: null });
    } else {
      expect((await server.exited).code, server.output()).not.toBe(0);
      expect(server.output(), "a refusal should say the socket path is too long").toMatch(/too long/i);
    }
    expect(fs.readdirSync(dir).filter((f) => f !== "pglite"), "files left in the data folder").toEqual([]);
  });
});

describe("configuration errors", () => {
  it("PORT=abc: exit 2, stderr names PORT", async () => {
    const r = await runServerToExit(tempDir("svc-config-"), { PORT: "abc" });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/\bPORT\b/);
    expect(r.stderr).toMatch(/abc/);
    expect(r.stdout).toBe("");
  });

  it("DATABASE_URL=mysql://x: exit 2, stderr names DATABASE_URL", async () => {
    const r = await runServerToExit(tempDir("svc-config-"), { DATABASE_URL: "mysql://x" });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/\bDATABASE_URL\b/);
    expect(r.stdout).toBe("");
  });
});

describe("one server per data folder", () => {
  it("a second server on a folder in use exits 1 saying so; the first keeps serving", async () => {
    const dir = migratedTempDir("svc-twice-");
    const first = await startServerProcess(dir);
    const dev = first.banner()!;
    const second = await runServerToExit(dir);
    expect(second.code, second.server.output()).toBe(1);
    expect(second.stderr).toMatch(/data folder .* is in use/);
    expect(second.stderr).toMatch(/SVC_DATA_DIR/);
    expect(second.server.logs().some((l) => l.msg === "listening")).toBe(false);
    expect(first.running).toBe(true);
    await passes(await first.fetch("/v1/plans", { headers: bearer(dev.appKey) }));
    expect(await first.stop()).toEqual({ code: 0, signal: null });
  });

  it("after a crash (SIGKILL), a new server takes the folder over at once: its holder is known dead", async () => {
    const dir = migratedTempDir("svc-crash-");
    const first = await startServerProcess(dir);
    const dev = first.banner()!;
    expect((await first.stop("SIGKILL")).signal).toBe("SIGKILL");
    // No waiting for the lock to go stale: as if it had been refreshed just now (the 10 s rule would refuse the
    // folder), a new server takes it because the holder named beside it is dead.
    fs.utimesSync(path.join(dir, "svc.lock"), new Date(), new Date());
    const second = await startServerProcess(dir);
    expect(second.banner()).toBeNull();
    await passes(await second.fetch("/v1/plans", { headers: bearer(dev.appKey) }));
    expect(await second.stop()).toEqual({ code: 0, signal: null });
  });

  it("a holder still alive keeps the folder however late its lock's last refresh (a server busy creating its database); once it is dead, the folder is taken", async () => {
    const dir = tempDir("svc-busy-holder-");
    const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 120_000)"], { stdio: "ignore" });
    try {
      // What a server leaves while its event loop is busy: the lock folder, refreshed long ago, and its holder beside it.
      fs.mkdirSync(path.join(dir, "svc.lock"), { recursive: true });
      const started = processStarted(holder.pid!);
      expect(started).not.toBeNull();
      fs.writeFileSync(path.join(dir, "svc.lock.holder"), JSON.stringify({ pid: holder.pid, host: os.hostname(), started, ns: pidNs }));
      const longAgo = new Date(Date.now() - 60_000);
      fs.utimesSync(path.join(dir, "svc.lock"), longAgo, longAgo);
      await expect(lockDataDir(dir, () => {})).rejects.toBeInstanceOf(DataDirLockedError);
      const refused = await runServerToExit(dir);
      expect(refused.code, refused.server.output()).toBe(1);
      expect(refused.stderr).toMatch(/data folder .* is in use/);
      expect(fs.existsSync(path.join(dir, "pglite"))).toBe(false);
      // The same pid with another start time is another process (a pid reused): not the holder.
      fs.writeFileSync(path.join(dir, "svc.lock.holder"), JSON.stringify({ pid: holder.pid, host: os.hostname(), started: `${started}0`, ns: pidNs }));
      const release = await lockDataDir(dir, () => {});
      await release();
      // A holder in another pid namespace (a container sharing the folder and the host name) cannot be checked: its lock's age decides.
      fs.mkdirSync(path.join(dir, "svc.lock"));
      fs.writeFileSync(path.join(dir, "svc.lock.holder"), JSON.stringify({ pid: holder.pid, host: os.hostname(), started, ns: "pid:[1]" }));
      fs.utimesSync(path.join(dir, "svc.lock"), new Date(), new Date());
      await expect(lockDataDir(dir, () => {})).rejects.toBeInstanceOf(DataDirLockedError);
      fs.utimesSync(path.join(dir, "svc.lock"), longAgo, longAgo);
      await (await lockDataDir(dir, () => {}))();
    } finally {
      holder.kill("SIGKILL");
    }
    // The holder dead: the folder is taken at once (positive control on the same shape of folder).
    fs.mkdirSync(path.join(dir, "svc.lock"), { recursive: true });
    const deadPid = holder.pid!;
    await until(() => holder.exitCode !== null || holder.signalCode !== null);
    fs.writeFileSync(path.join(dir, "svc.lock.holder"), JSON.stringify({ pid: deadPid, host: os.hostname(), started: "1", ns: pidNs }));
    const server = await startServerProcess(dir);
    await ok(await server.fetch("/healthz"));
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });
});
