import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { lockDataDir } from "../../server/data-dir-lock.js";
import { DATABASES } from "../helpers/databases.js";
import { bearer, expectAccepted, expectError } from "../helpers/requests.js";
import { jsonOf, removeTempDirs, runCli, startServerProcess, stopAll, tempDir, type ServerProcess } from "../helpers/process.js";
import { migratedTempDir } from "../helpers/migrated-folder.js";

/**
 * The `svc` CLI as a person runs it: `node bin/svc.js ...` in a child process, on
 * a data folder of its own. It must work on a free folder (it opens the embedded
 * database itself), on a folder held by a running server (through its admin
 * socket, and the keys it makes then work against that server at once), on
 * Postgres, and say clearly what is wrong otherwise.
 */

const APP_KEY = /^sk_svc_[a-z0-9]{16}\.[A-Za-z0-9_-]{43}$/;
const CONNECT_KEY = /^pk_svc_[a-z0-9]{24}$/;

interface NewKeys {
  appId: string;
  environment: "test" | "live";
  appKey: string;
  connectKey: string;
}
interface AppInfo {
  appId: string;
  name: string;
  createdAt: string;
}
interface KeyInfo {
  kind: "app" | "connect";
  id: string;
  display: string;
  appId: string;
  environment: string;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  state: "active" | "expiring" | "expired" | "revoked";
}
interface Rotated {
  kind: "app" | "connect";
  key: string;
  replaced: string;
  oldKeyExpiresAt: string;
  appId: string;
  environment: string;
}

const keyIdOf = (appKey: string) => /^sk_svc_([a-z0-9]{16})\./.exec(appKey)![1];
const secretOf = (appKey: string) => appKey.slice(appKey.indexOf(".") + 1);

function expectNewKeys(r: NewKeys, environment: "test" | "live") {
  expect(Object.keys(r).sort()).toEqual(["appId", "appKey", "connectKey", "environment"]);
  expect(r.appId).toMatch(/^app_[a-z0-9]+$/);
  expect(r.environment).toBe(environment);
  expect(r.appKey).toMatch(APP_KEY);
  expect(r.connectKey).toMatch(CONNECT_KEY);
}

afterAll(async () => {
  await stopAll();
  removeTempDirs();
});

describe("svc CLI, no server running, embedded database", () => {
  let dir: string;
  const svc = (...args: string[]) => runCli(args, { SVC_DATA_DIR: dir });
  let testApp: NewKeys;
  let liveApp: NewKeys;

  beforeAll(() => {
    dir = migratedTempDir("svc-cli-");
  });

  it("apps create --json prints exactly one JSON object with the new app's keys, in environment test by default", async () => {
    testApp = jsonOf<NewKeys>(await svc("apps", "create", "--name", "First app", "--json"));
    expectNewKeys(testApp, "test");
    // It opened the folder itself and let it go again: the database is there, the lock is not.
    expect(fs.existsSync(path.join(dir, "pglite"))).toBe(true);
    expect(fs.existsSync(path.join(dir, "svc.lock"))).toBe(false);
    expect(fs.existsSync(path.join(dir, "admin.sock"))).toBe(false);
  });

  it("--environment live gives a live app", async () => {
    liveApp = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Live app", "--environment", "live", "--json"));
    expectNewKeys(liveApp, "live");
    expect(liveApp.appId).not.toBe(testApp.appId);
    expect(liveApp.appKey).not.toBe(testApp.appKey);
  });

  it("apps list --json lists both: the data folder persists between invocations", async () => {
    const apps = jsonOf<AppInfo[]>(await svc("apps", "list", "--json"));
    expect(apps.map((a) => ({ appId: a.appId, name: a.name }))).toEqual([
      { appId: testApp.appId, name: "First app" },
      { appId: liveApp.appId, name: "Live app" },
    ]);
    for (const a of apps) expect(Number.isNaN(Date.parse(a.createdAt))).toBe(false);
  });

  it("apps list without --json prints one line per app", async () => {
    const r = await svc("apps", "list");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(testApp.appId);
    expect(r.stdout).toContain("First app");
    expect(r.stdout).toContain(liveApp.appId);
  });

  it("keys list --app --json shows the app's keys and their states, never a secret", async () => {
    const r = await svc("keys", "list", "--app", testApp.appId, "--json");
    const keys = jsonOf<KeyInfo[]>(r);
    expect(keys.map((k) => ({ kind: k.kind, id: k.id, appId: k.appId, environment: k.environment, state: k.state }))).toEqual([
      { kind: "app", id: keyIdOf(testApp.appKey), appId: testApp.appId, environment: "test", state: "active" },
      { kind: "connect", id: testApp.connectKey, appId: testApp.appId, environment: "test", state: "active" },
    ]);
    expect(r.stdout).not.toContain(secretOf(testApp.appKey));
    const live = jsonOf<KeyInfo[]>(await svc("keys", "list", "--app", liveApp.appId, "--json"));
    expect(live.map((k) => [k.kind, k.environment, k.state])).toEqual([
      ["app", "live", "active"],
      ["connect", "live", "active"],
    ]);
  });

  it("keys rotate and keys revoke work on the folder directly, and keys list shows the states", async () => {
    const rotated = jsonOf<Rotated>(await svc("keys", "rotate", testApp.appKey, "--json"));
    expect(rotated.kind).toBe("app");
    expect(rotated.key).toMatch(APP_KEY);
    expect(rotated.replaced).toBe(keyIdOf(testApp.appKey));
    // Default grace: 24 hours.
    const grace = Date.parse(rotated.oldKeyExpiresAt) - Date.now();
    expect(grace).toBeGreaterThan(23.5 * 3600_000);
    expect(grace).toBeLessThanOrEqual(24 * 3600_000);

    const revoked = jsonOf<KeyInfo>(await svc("keys", "revoke", testApp.connectKey, "--json"));
    expect({ kind: revoked.kind, id: revoked.id, state: revoked.state }).toEqual({ kind: "connect", id: testApp.connectKey, state: "revoked" });

    const keys = jsonOf<KeyInfo[]>(await svc("keys", "list", "--app", testApp.appId, "--json"));
    expect(keys.map((k) => [k.kind, k.id, k.state])).toEqual([
      ["app", keyIdOf(testApp.appKey), "expiring"],
      ["app", keyIdOf(rotated.key), "active"],
      ["connect", testApp.connectKey, "revoked"],
    ]);
  });
});

describe("svc CLI, server running on the same data folder", () => {
  let dir: string;
  let server: ServerProcess;
  const svc = (...args: string[]) => runCli(args, { SVC_DATA_DIR: dir });
  const plans = (appKey: string) => server.fetch("/v1/plans", { headers: bearer(appKey) });
  const deviceCode = (connectKey: string) =>
    server.fetch(`/c/${connectKey}/v1/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ hostname: "h", platform: "linux", arch: "x64", client: "t" }),
    });
  const passes = expectAccepted;
  const issued = async (res: Response) => expect(res.status, await res.text()).toBe(200);
  const revokedAnswer = async (res: Response) => expectError(res, 401, "revoked_credential");

  beforeAll(async () => {
    dir = migratedTempDir("svc-cli-server-");
    server = await startServerProcess(dir);
  });

  afterAll(async () => {
    await server?.stop();
  });

  it("apps create and apps list go through the server's admin socket", async () => {
    expect(fs.existsSync(path.join(dir, "admin.sock"))).toBe(true);
    const created = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Made while running", "--json"));
    expectNewKeys(created, "test");
    const apps = jsonOf<AppInfo[]>(await svc("apps", "list", "--json"));
    // The server's dev app from its first start, then ours.
    expect(apps.map((a) => a.name)).toEqual(["Local development app", "Made while running"]);
    expect(apps[1].appId).toBe(created.appId);
    expect(server.running).toBe(true);
  });

  it("an app key made by the CLI authenticates against the running server at once; a revoked one does not", async () => {
    const app = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Revoke me", "--json"));
    await passes(await plans(app.appKey));

    const revoked = jsonOf<KeyInfo>(await svc("keys", "revoke", app.appKey, "--json"));
    expect({ kind: revoked.kind, id: revoked.id, state: revoked.state }).toEqual({ kind: "app", id: keyIdOf(app.appKey), state: "revoked" });
    await revokedAnswer(await plans(app.appKey));

    const keys = jsonOf<KeyInfo[]>(await svc("keys", "list", "--app", app.appId, "--json"));
    expect(keys.map((k) => [k.kind, k.state])).toEqual([
      ["app", "revoked"],
      ["connect", "active"],
    ]);

    // Revoking twice is refused, and says why.
    const again = await svc("keys", "revoke", app.appKey);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already revoked/);
  });

  it("a live app's key authenticates too", async () => {
    const app = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Live", "--environment", "live", "--json"));
    expectNewKeys(app, "live");
    await passes(await plans(app.appKey));
  });

  it("keys rotate --grace 0 stops the old key at once; the printed new key works", async () => {
    const app = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Rotate now", "--json"));
    await passes(await plans(app.appKey));
    const rotated = jsonOf<Rotated>(await svc("keys", "rotate", app.appKey, "--grace", "0", "--json"));
    expect(rotated.kind).toBe("app");
    expect(rotated.key).toMatch(APP_KEY);
    expect(rotated.key).not.toBe(app.appKey);
    await revokedAnswer(await plans(app.appKey));
    await passes(await plans(rotated.key));
  });

  it("keys rotate with the default grace keeps the old key working alongside the new one", async () => {
    const app = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Rotate later", "--json"));
    // Without --json: the person-readable form shows the new key too.
    const r = await svc("keys", "rotate", app.appKey);
    expect(r.code, r.stderr).toBe(0);
    const newKey = /new app key\s+(\S+)/.exec(r.stdout)?.[1] ?? "";
    expect(newKey, r.stdout).toMatch(APP_KEY);
    await passes(await plans(app.appKey));
    await passes(await plans(newKey));
    const keys = jsonOf<KeyInfo[]>(await svc("keys", "list", "--app", app.appId, "--json"));
    expect(keys.filter((k) => k.kind === "app").map((k) => [k.id, k.state])).toEqual([
      [keyIdOf(app.appKey), "expiring"],
      [keyIdOf(newKey), "active"],
    ]);
  });

  it("a revoked connect key stops pairing at once; a live one passes", async () => {
    const app = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Pairing", "--json"));
    await issued(await deviceCode(app.connectKey));
    const revoked = jsonOf<KeyInfo>(await svc("keys", "revoke", app.connectKey, "--json"));
    expect({ kind: revoked.kind, state: revoked.state }).toEqual({ kind: "connect", state: "revoked" });
    await revokedAnswer(await deviceCode(app.connectKey));
    // The app key of the same app is untouched.
    await passes(await plans(app.appKey));
  });

  it("keys rotate --grace 0 on a connect key: the old one is refused, the new one passes", async () => {
    const app = jsonOf<NewKeys>(await svc("apps", "create", "--name", "Pairing rotate", "--json"));
    const rotated = jsonOf<Rotated>(await svc("keys", "rotate", app.connectKey, "--grace", "0", "--json"));
    expect(rotated.kind).toBe("connect");
    expect(rotated.key).toMatch(CONNECT_KEY);
    await revokedAnswer(await deviceCode(app.connectKey));
    await issued(await deviceCode(rotated.key));
  });

  it("errors of an operation come back through the socket as the CLI's own", async () => {
    const r = await svc("keys", "revoke", "nosuchkey");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/No such app key/);
    const l = await svc("keys", "list", "--app", "app_nosuchapp", "--json");
    expect(l.code).toBe(1);
    expect(l.stderr).toMatch(/No app app_nosuchapp/);
    expect(l.stdout).toBe("");
  });

  it("once the server stops, the CLI opens the folder itself and sees everything made through the socket", async () => {
    const apps = jsonOf<AppInfo[]>(await svc("apps", "list", "--json"));
    expect((await server.stop()).code).toBe(0);
    expect(fs.existsSync(path.join(dir, "admin.sock"))).toBe(false);
    const after = jsonOf<AppInfo[]>(await svc("apps", "list", "--json"));
    expect(after).toEqual(apps);
  });
});

describe("svc CLI, data folder locked but no server answering", () => {
  let release: (() => Promise<void>) | null = null;

  afterEach(async () => {
    await release?.();
    release = null;
  });

  it("exits non-zero and says the folder is in use and that no admin socket answers", async () => {
    const dir = tempDir("svc-cli-locked-");
    release = await lockDataDir(dir, () => {});
    const r = await runCli(["apps", "list", "--json"], { SVC_DATA_DIR: dir });
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/in use/);
    expect(r.stderr).toMatch(/admin socket|admin\.sock/);
    expect(r.stderr).not.toMatch(/\bat .+\.(ts|js):\d+/); // a message, not a stack trace
  });

  it("with a stale admin socket left behind (a crashed server), says the socket does not answer", async () => {
    const dir = tempDir("svc-cli-stale-");
    release = await lockDataDir(dir, () => {});
    const socket = path.join(dir, "admin.sock");
    // A real Unix socket whose process is gone: it exits without closing it, so the file stays.
    const made = spawnSync(process.execPath, ["-e", `require("net").createServer().listen(${JSON.stringify(socket)}, () => process.exit(0))`]);
    expect(made.status).toBe(0);
    expect(fs.statSync(socket).isSocket()).toBe(true);
    const r = await runCli(["keys", "revoke", "nosuchkey"], { SVC_DATA_DIR: dir });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/in use/);
    expect(r.stderr).toMatch(/admin socket .*admin\.sock does not answer/);
    expect(r.stderr).not.toMatch(/\bat .+\.(ts|js):\d+/);
  });

  it("once the lock is released, the same folder works", async () => {
    const dir = migratedTempDir("svc-cli-released-");
    const lock = await lockDataDir(dir, () => {});
    await lock();
    const made = jsonOf<NewKeys>(await runCli(["apps", "create", "--name", "After the lock", "--json"], { SVC_DATA_DIR: dir }));
    expect(jsonOf<AppInfo[]>(await runCli(["apps", "list", "--json"], { SVC_DATA_DIR: dir })).map((a) => a.appId)).toEqual([made.appId]);
  });
});

describe("svc CLI where there is no database", () => {
  it("apps list in a folder that does not exist says where it looked, exits 1 and creates nothing", async () => {
    const dir = path.join(tempDir("svc-cli-none-"), "not-here");
    const r = await runCli(["apps", "list"], { SVC_DATA_DIR: dir });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`No database in the data folder ${dir}`);
    expect(r.stderr).toContain(path.join(dir, "pglite"));
    expect(r.stderr).toMatch(/--data-dir or SVC_DATA_DIR/);
    expect(r.stderr).not.toMatch(/\bat .+\.(ts|js):\d+/);
    expect(fs.existsSync(dir)).toBe(false);
  });

  it("apps list and keys list in an empty folder (--data-dir) exit 1 and leave it empty; apps create still makes the database", async () => {
    const dir = tempDir("svc-cli-empty-");
    for (const args of [["apps", "list", "--json"], ["keys", "list", "--app", "app_x"]]) {
      const r = await runCli(["--data-dir", dir, ...args], {});
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr).toContain(`No database in the data folder ${dir}`);
      expect(fs.readdirSync(dir)).toEqual([]);
    }
    const made = jsonOf<NewKeys>(await runCli(["--data-dir", dir, "apps", "create", "--name", "First", "--json"], {}));
    expect(jsonOf<AppInfo[]>(await runCli(["--data-dir", dir, "apps", "list", "--json"], {})).map((a) => a.appId)).toEqual([made.appId]);
  });
});

describe("svc CLI on Postgres", () => {
  const postgresUrl = inject("postgresUrl");
  const { db: postgres } = DATABASES[1];
  let url: string;
  let drop: (() => Promise<void>) | undefined;
  let dir: string;
  let created: NewKeys;

  beforeAll(async () => {
    if (postgresUrl === null) return;
    const made = await postgres.create();
    if (made.target.kind !== "postgres") throw new Error("expected a Postgres target");
    url = made.target.url;
    drop = made.drop;
    dir = tempDir("svc-cli-pg-");
  });

  afterAll(async () => {
    await drop?.();
  });

  it.skipIf(postgresUrl === null)("--database-url: apps create --json works on a fresh database, and the data folder is not touched", async () => {
    created = jsonOf<NewKeys>(await runCli(["--database-url", url, "apps", "create", "--name", "On Postgres", "--json"], { SVC_DATA_DIR: dir }));
    expectNewKeys(created, "test");
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it.skipIf(postgresUrl === null)("DATABASE_URL: apps list --json and keys list --json see it", async () => {
    const env = { SVC_DATA_DIR: dir, DATABASE_URL: url };
    const apps = jsonOf<AppInfo[]>(await runCli(["apps", "list", "--json"], env));
    expect(apps.map((a) => ({ appId: a.appId, name: a.name }))).toEqual([{ appId: created.appId, name: "On Postgres" }]);
    jsonOf(await runCli(["keys", "revoke", created.connectKey, "--json"], env));
    const keys = jsonOf<KeyInfo[]>(await runCli(["keys", "list", "--app", created.appId, "--json"], env));
    expect(keys.map((k) => [k.kind, k.state])).toEqual([
      ["app", "active"],
      ["connect", "revoked"],
    ]);
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});

describe("svc CLI, bad input", () => {
  let dir: string;
  const svc = (...args: string[]) => runCli(args, { SVC_DATA_DIR: dir });

  beforeAll(() => {
    dir = tempDir("svc-cli-bad-");
  });

  it("apps create without --name exits non-zero and names the missing option", async () => {
    const r = await svc("apps", "create", "--json");
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/required option '--name <name>' not specified/);
  });

  it("keys revoke of an unknown key exits 1 with 'No such app key'", async () => {
    // On a folder with a database (elsewhere, a command without one says so: see above).
    const other = migratedTempDir("svc-cli-bad-keys-");
    jsonOf<NewKeys>(await runCli(["apps", "create", "--name", "Some app", "--json"], { SVC_DATA_DIR: other }));
    const r = await runCli(["keys", "revoke", "nosuchkey"], { SVC_DATA_DIR: other });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/No such app key/);
  });

  it("--environment prod is refused, and nothing is created", async () => {
    const r = await svc("apps", "create", "--name", "Prod", "--environment", "prod", "--json");
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/'prod' is invalid/);
    expect(r.stderr).toMatch(/test, live/);
    // Not even a database: listing says there is none.
    const list = await svc("apps", "list", "--json");
    expect(list.code).toBe(1);
    expect(list.stderr).toMatch(/No database in the data folder/);
  });

  it("keys rotate --grace with a bad duration is refused", async () => {
    const r = await svc("keys", "rotate", "nosuchkey", "--grace", "soon");
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/duration/);
  });

  it("a DATABASE_URL that is not Postgres is a configuration error: exit 2, naming DATABASE_URL", async () => {
    const r = await svc("--database-url", "mysql://x", "apps", "list");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/DATABASE_URL/);
  });
});
