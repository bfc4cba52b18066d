import fs from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, tempDir } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { onPostgres } from "../helpers/databases.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";

/**
 * A real worker's life against real servers: online, silent (heartbeat timeout),
 * back; a server restart survived; removed by the app or by the user; and
 * several instances sharing one Postgres.
 */

const workers: WorkerProcess[] = [];
let model: ModelStandIn;

beforeAll(async () => {
  model = await startModelStandIn();
});
afterEach(() => {
  for (const w of workers.splice(0)) w.stop();
});
afterAll(async () => {
  await model?.close();
  removeTempDirs();
});

const settings = () => ({ runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
function start(home: string, args: string[] = ["start"]) {
  const w = spawnWorker(args, home);
  workers.push(w);
  return w;
}
async function stateOf(server: { fetch(p: string, i?: RequestInit): Promise<Response> }, appKey: string, user: string, machineId: string) {
  const body = (await (await server.fetch(`/v1/users/${user}/compute`, { headers: bearer(appKey) })).json()) as { machines: { id: string; state: string }[] };
  return body.machines.find((m) => m.id === machineId)?.state ?? "absent";
}
const eventually = (check: () => Promise<boolean>, timeoutMs = 20_000, what = "condition") => pollUntil(check, (ok) => ok, timeoutMs, what);

describe("one server", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
  });
  afterAll(() => server?.close());

  it("a worker that vanishes without a goodbye goes offline after the heartbeat timeout, and online again when it speaks", async () => {
    // A server of its own with a 3 s heartbeat timeout: the silence is real time (the connection's own timer), not the clock's.
    const quick = await startTestServer({ kind: "pglite", dataDir: null }, { WORKER_HEARTBEAT_TIMEOUT_SECONDS: "3" }, { runningClock: true });
    try {
      const m = await pairViaApi(quick, quick.dev, "vanish", settings());
      const w = start(m.home);
      await w.waitFor(/Connected/);
      await eventually(async () => (await stateOf(quick, quick.dev.appKey, "vanish", m.machineId)) === "online");
      // Frozen, not closed: the socket stays open on its side, only the heartbeats stop.
      process.kill(-w.child.pid!, "SIGSTOP");
      try {
        // Still online a second in (a beat every second, the timeout 3 s), offline once the timeout passed.
        await new Promise((r) => setTimeout(r, 1_000));
        expect(await stateOf(quick, quick.dev.appKey, "vanish", m.machineId)).toBe("online");
        await eventually(async () => (await stateOf(quick, quick.dev.appKey, "vanish", m.machineId)) === "offline", 8_000, "offline after the heartbeat timeout");
      } finally {
        process.kill(-w.child.pid!, "SIGCONT");
      }
      await eventually(async () => (await stateOf(quick, quick.dev.appKey, "vanish", m.machineId)) === "online", 15_000, "online once it speaks again");
    } finally {
      await quick.close();
    }
  });

  it("one start per machine: a second one on the same pairing refuses, and a dead one's lock is taken over", async () => {
    const m = await pairViaApi(server, server.dev, "twice", settings());
    const first = start(m.home);
    await first.waitFor(/Connected/);
    const second = start(m.home);
    expect((await second.exited).code).toBe(1);
    expect(second.stderr).toMatch(/Another svc-worker \(pid \d+\) is already serving this machine/);
    expect(first.child.exitCode).toBeNull();
    first.stop();
    await first.exited;
    // Killed without cleaning up: its lock names a dead process, so the next start goes ahead.
    const holder = Number(fs.readFileSync(path.join(m.home, "worker.lock"), "utf8"));
    await eventually(async () => {
      try {
        process.kill(holder, 0);
        return false;
      } catch {
        return true;
      }
    }, 10_000, "the killed worker gone");
    const third = start(m.home);
    await third.waitFor(/Connected/);
  });

  it("status says what is paired, what it can serve and that the token is accepted; unpair removes the machine for good", async () => {
    const m = await pairViaApi(server, server.dev, "leaver", settings());
    const status = start(m.home, ["status"]);
    expect((await status.exited).code).toBe(0);
    expect(status.stdout).toContain(`Paired with Local development app (test) as ${m.machineId}`);
    expect(status.stdout).toMatch(/can serve ollama \(model, user_hardware\): llama3\.2:3b, qwen2\.5:7b/);
    expect(status.stdout).toMatch(/Token: accepted/);
    // A status check is not a worker: the machine never went online for it.
    expect(await stateOf(server, server.dev.appKey, "leaver", m.machineId)).toBe("offline");

    const unpair = start(m.home, ["unpair"]);
    expect((await unpair.exited).code).toBe(0);
    expect(unpair.stdout).toMatch(/Unpaired: mch_\w+ is removed from Local development app/);
    expect(fs.existsSync(path.join(m.home, "credentials.json"))).toBe(false);
    expect((await server.db.prisma.machine.findUniqueOrThrow({ where: { id: m.machineId } })).revokedAt).not.toBeNull();
    expect(await stateOf(server, server.dev.appKey, "leaver", m.machineId)).toBe("absent");

    const after = start(m.home, ["start"]);
    expect((await after.exited).code).toBe(1);
    expect(after.stderr).toMatch(/not paired yet/);
  });

  it("revoked by the app: the connection closes at once, the worker stops saying so, the token is refused from then on", async () => {
    const m = await pairViaApi(server, server.dev, "revokee", settings());
    const w = start(m.home);
    await w.waitFor(/Connected/);
    const res = await server.fetch(`/v1/users/revokee/machines/${m.machineId}`, { method: "DELETE", headers: bearer(server.dev.appKey) });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: m.machineId });
    const exit = await w.exited;
    expect(exit.code).toBe(1);
    expect(w.stdout).toMatch(/This machine was removed from Local development app/);
    const status = start(m.home, ["status"]);
    expect((await status.exited).code).toBe(1);
    expect(status.stdout).toMatch(/Token: refused/);
    // Revoking again, or another user's machine, is 404 and changes nothing.
    expect((await server.fetch(`/v1/users/revokee/machines/${m.machineId}`, { method: "DELETE", headers: bearer(server.dev.appKey) })).status).toBe(404);
    const other = await pairViaApi(server, server.dev, "bystander", settings());
    expect((await server.fetch(`/v1/users/revokee/machines/${other.machineId}`, { method: "DELETE", headers: bearer(server.dev.appKey) })).status).toBe(404);
    expect((await server.fetch(`/v1/machines/${other.machineId}`, { method: "DELETE", headers: bearer(m.session) })).status).toBe(404);
    expect((await server.db.prisma.machine.findUniqueOrThrow({ where: { id: other.machineId } })).revokedAt).toBeNull();
    // The owner may remove it from the connect page's endpoint.
    expect((await server.fetch(`/v1/machines/${other.machineId}`, { method: "DELETE", headers: bearer(other.session) })).status).toBe(200);
  });
});

describe("a server restart", () => {
  it("is routine: the worker reconnects with backoff and is online again, on the same database", async () => {
    const dbDir = tempDir("svc-restart-db-");
    const target = { kind: "pglite" as const, dataDir: dbDir };
    let server = await startTestServer(target, {}, { runningClock: true });
    const port = new URL(server.url).port;
    const keys = server.dev;
    try {
      const m = await pairViaApi(server, keys, "steady", settings());
      const w = start(m.home);
      await w.waitFor(/Connected/);
      await server.close();
      await w.waitFor(/connection lost .*reconnecting in/);
      server = await startTestServer(target, { PORT: port }, { runningClock: true });
      await eventually(async () => (w.stdout.match(/✓ Connected/g) ?? []).length === 2, 30_000, "a second connection");
      await eventually(async () => (await stateOf(server, keys.appKey, "steady", m.machineId)) === "online");
      expect(w.child.exitCode).toBeNull();
    } finally {
      await server.close();
    }
  });
});


onPostgres("several instances sharing one Postgres", (postgres) => {
  let a: TestServer;
  let b: TestServer;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const made = await postgres.create();
    drop = made.drop;
    a = await startTestServer(made.target, {}, { runningClock: true });
    b = await startTestServer(made.target, {}, { runningClock: true });
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await drop?.();
  });

  it("a worker on A is online as B reads it, a revocation made on B closes it on A at once, and its goodbye on A is seen on B", async () => {
    const m = await pairViaApi(a, a.dev, "roamer", settings());
    const w = start(m.home);
    await w.waitFor(/Connected/);
    await eventually(async () => (await stateOf(b, a.dev.appKey, "roamer", m.machineId)) === "online");
    expect(a.services.workers.holds(m.machineId)).toBe(true);
    expect(b.services.workers.holds(m.machineId)).toBe(false);

    const other = await pairViaApi(a, a.dev, "roamer", settings(), "second-machine");
    const w2 = start(other.home);
    await w2.waitFor(/Connected/);
    await eventually(async () => (await stateOf(b, a.dev.appKey, "roamer", other.machineId)) === "online");
    w2.child.kill("SIGINT");
    await w2.exited;
    await eventually(async () => (await stateOf(b, a.dev.appKey, "roamer", other.machineId)) === "offline", 10_000, "offline on B after the goodbye on A");

    const revokedAt = Date.now();
    const res = await b.fetch(`/v1/users/roamer/machines/${m.machineId}`, { method: "DELETE", headers: bearer(a.dev.appKey) });
    expect(res.status).toBe(200);
    expect((await w.exited).code).toBe(1);
    // Woken by the notification, not by the next heartbeat (every 10 s).
    expect(Date.now() - revokedAt).toBeLessThan(5_000);
    expect(w.stdout).toMatch(/This machine was removed/);
    expect(a.services.workers.holds(m.machineId)).toBe(false);
  });

  it("a broken LISTEN connection is opened again: a revocation after it still closes the worker at once", async () => {
    const m = await pairViaApi(a, a.dev, "listener", settings());
    const w = start(m.home);
    await w.waitFor(/Connected/);
    // Cut every LISTEN connection of this database, as a Postgres restart or a failover would.
    const [{ datname }] = await a.db.query<{ datname: string }>("SELECT current_database() AS datname");
    const cut = await a.db.query<{ pid: number }>(
      "SELECT pg_terminate_backend(pid) AS t, pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()",
      [datname],
    );
    expect(cut.length).toBeGreaterThanOrEqual(2);
    const gone = new Set(cut.map((c) => c.pid));
    await eventually(async () => {
      const back = await a.db.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN %'", [datname]);
      return back.filter((r) => !gone.has(r.pid)).length >= cut.length;
    }, 10_000, "new LISTEN connections");
    const revokedAt = Date.now();
    expect((await b.fetch(`/v1/users/listener/machines/${m.machineId}`, { method: "DELETE", headers: bearer(a.dev.appKey) })).status).toBe(200);
    expect((await w.exited).code).toBe(1);
    expect(Date.now() - revokedAt).toBeLessThan(5_000);
  });
});
