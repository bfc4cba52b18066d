import { randomBytes } from "node:crypto";
import net from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { WORKER_CLOSE, WORKER_CONNECT_PATH, WORKER_MAX_FRAME_BYTES, workerMessage } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi, type PairedMachine } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { closeRawWorkers, connectRawWorker } from "../helpers/raw-worker.js";
import { bearer } from "../helpers/requests.js";
import { tableCounts } from "../helpers/snapshot.js";

/**
 * The worker WebSocket protocol as a raw client sees it, no svc-worker in between:
 * the handshake refuses every wrong credential with a plain HTTP envelope before
 * the upgrade, a connection must say hello before anything counts, bad frames get
 * an `error` message and never crash anything, and the machine's live state
 * (online / offline) follows hello, heartbeats, replacement and close.
 */

const HELLO = workerMessage("hello", {
  client: "t",
  version: "1",
  runtimes: [{ name: "ollama", kind: "model", costClass: "user_hardware", models: ["m1"] }],
});
const heartbeat = (busy: string[] = []) => workerMessage("heartbeat", { busy });

interface Refusal {
  status: number;
  contentType: string;
  body: { error: { code: string; type: string; message: string; requestId: string } };
}

interface MachineList {
  data: { id: string; state: string; lastSeenAt: string | null; runtimes: { name: string; models: string[]; state: string }[] }[];
}

/** A well-formed pairing token nobody was given. */
const unknownToken = () => `pt_svc_${randomBytes(32).toString("base64url")}`;

onEachDatabase("worker protocol on $db.name", (db) => {
  let server: TestServer;
  const open: WebSocket[] = [];
  let users = 0;

  beforeAll(async () => {
    server = await startTestServerOn(db);
  });
  afterEach(() => closeAll(open));
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  const userNames = new Map<string, string>();
  const pair = async (): Promise<PairedMachine> => {
    const user = `proto-user-${++users}`;
    const m = await pairViaApi(server, server.dev, user);
    userNames.set(m.machineId, user);
    return m;
  };
  const userOf = (m: PairedMachine) => userNames.get(m.machineId)!;
  const connect = (token: string) => connectTo(server, open, token);
  const refusal = (headers: Record<string, string>, path = WORKER_CONNECT_PATH) => refusalFrom(server, headers, path);
  const machineRow = (id: string) => server.db.prisma.machine.findUniqueOrThrow({ where: { id } });
  const stateOf = async (m: PairedMachine) => {
    const res = await server.fetch("/v1/machines", { headers: bearer(m.session) });
    expect(res.status).toBe(200);
    const list = (await res.json()) as MachineList;
    return list.data.find((x) => x.id === m.machineId)!; // undefined once removed
  };
  /** Connects and says hello; resolves once welcomed (the machine is online by then). */
  const online = async (m: PairedMachine) => {
    const c = await connect(m.token);
    c.send(HELLO);
    await c.next("welcome");
    return c;
  };

  describe("the handshake", () => {
    it("refuses every wrong credential with a 401 envelope before the upgrade, and changes nothing", async () => {
      const m = await pair();
      const session = m.session;
      const before = { counts: await tableCounts(server.db), machine: await machineRow(m.machineId) };

      const cases: [string, Record<string, string>, string][] = [
        ["no Authorization header", {}, "missing_credential"],
        ["Bearer garbage", bearer("garbage"), "invalid_credential"],
        ["not a Bearer header", { authorization: `Basic ${m.token}` }, "invalid_credential"],
        ["an app key", bearer(server.dev.appKey), "wrong_credential_kind"],
        ["a session token", bearer(session), "wrong_credential_kind"],
        ["a connect key", bearer(server.dev.connectKey), "wrong_credential_kind"],
        ["a well-formed unknown pairing token", bearer(unknownToken()), "invalid_credential"],
        ["a malformed pairing token", bearer(`${m.token}x`), "invalid_credential"],
      ];
      for (const [what, headers, code] of cases) {
        const r = await refusal(headers);
        expect({ what, status: r.status, code: r.body.error.code }).toEqual({ what, status: 401, code });
        expect(r.contentType, what).toMatch(/^application\/json/);
        expect(r.body.error.type, what).toBe("authentication_error");
        expect(r.body.error.message.length, what).toBeGreaterThan(0);
        expect(r.body.error.requestId, what).toMatch(/^req_/);
      }

      // The real token in the URL is never taken: without the header it is a missing credential.
      const inUrl = await refusal({}, `${WORKER_CONNECT_PATH}?token=${encodeURIComponent(m.token)}`);
      expect([inUrl.status, inUrl.body.error.code]).toEqual([401, "missing_credential"]);
      const inUrlAsBearer = await refusal({}, `${WORKER_CONNECT_PATH}?access_token=${encodeURIComponent(m.token)}&authorization=Bearer%20${encodeURIComponent(m.token)}`);
      expect([inUrlAsBearer.status, inUrlAsBearer.body.error.code]).toEqual([401, "missing_credential"]);

      // Another path is not a WebSocket route, whatever credential comes with it.
      for (const headers of [{}, bearer(m.token)]) {
        const other = await refusal(headers, "/v1/other");
        expect([other.status, other.body.error.code]).toEqual([404, "route_not_found"]);
        expect(other.contentType).toMatch(/^application\/json/);
      }

      expect(await tableCounts(server.db)).toEqual(before.counts);
      expect(await machineRow(m.machineId)).toEqual(before.machine);
      expect(before.machine.connectedInstance).toBeNull();
      expect((await stateOf(m)).state).toBe("offline");
      expect(server.services.workers.holds(m.machineId)).toBe(false);
    });

    it("a revoked machine is closed with 4001 and its token refused with revoked_credential", async () => {
      const m = await pair();
      const c = await online(m);
      const res = await server.fetch(`/v1/users/${userOf(m)}/machines/${m.machineId}`, { method: "DELETE", headers: bearer(server.dev.appKey) });
      expect(res.status).toBe(200);
      expect((await c.closed).code).toBe(WORKER_CLOSE.revoked);
      const revoked = await until(() => machineRow(m.machineId), (r) => r.connectedInstance === null);
      expect(revoked.revokedAt).not.toBeNull();
      expect(await stateOf(m)).toBeUndefined(); // no longer listed

      const r = await refusal(bearer(m.token));
      expect([r.status, r.body.error.code]).toEqual([401, "revoked_credential"]);
      expect(r.contentType).toMatch(/^application\/json/);
      expect(await machineRow(m.machineId)).toEqual(revoked);
      expect(server.services.workers.holds(m.machineId)).toBe(false);
    });

    // Revoked between its handshake and its hello: the notification closes it, and
    // should it say hello anyway it is not welcomed (the row refuses a removed machine).
    it("a connection revoked before its hello is not welcomed but closed with 4001", async () => {
      const m = await pair();
      const c = await connect(m.token);
      const res = await server.fetch(`/v1/users/${userOf(m)}/machines/${m.machineId}`, { method: "DELETE", headers: bearer(server.dev.appKey) });
      expect(res.status).toBe(200);
      c.send(HELLO);
      const outcome = await Promise.race([c.closed.then((x) => `closed ${x.code}`), c.next("welcome", 3_000).then(() => "welcomed")]);
      expect(server.services.workers.holds(m.machineId)).toBe(false);
      expect(outcome).toBe(`closed ${WORKER_CLOSE.revoked}`);
    });
  });

  describe("a valid connection", () => {
    it("must say hello first; after hello it is welcomed, online, with its runtimes", async () => {
      const m = await pair();
      const c = await connect(m.token);

      c.send(heartbeat());
      const refused = await c.next("error");
      expect(refused.payload).toEqual({ code: "bad_message", message: expect.stringMatching(/hello first/) });
      expect((await machineRow(m.machineId)).connectedInstance).toBeNull();
      expect((await stateOf(m)).state).toBe("offline");
      expect(server.services.workers.holds(m.machineId)).toBe(false);

      c.send(HELLO);
      const welcome = await c.next("welcome");
      expect(welcome).toEqual({ v: 1, type: "welcome", payload: { machineId: m.machineId, heartbeatSeconds: expect.any(Number), appName: expect.any(String), features: ["job_usage", "job_spans", "runtime_limits", "job_resume"], jobGraceSeconds: 300 } });
      expect(welcome.payload.heartbeatSeconds).toBeGreaterThan(0);

      const row = await machineRow(m.machineId);
      expect(row.connectedInstance).toBe(server.services.workers.instance);
      expect(row.lastHeartbeatAt).not.toBeNull();
      const runtimes = await server.db.prisma.runtime.findMany({ where: { machineId: m.machineId } });
      expect(runtimes.map((r) => [r.name, r.kind, r.costClass, r.models])).toEqual([["ollama", "model", "user_hardware", ["m1"]]]);

      const seen = await stateOf(m);
      expect(seen.state).toBe("online");
      expect(seen.runtimes).toEqual([expect.objectContaining({ name: "ollama", models: ["m1"], state: "online" })]);
      expect(server.services.workers.holds(m.machineId)).toBe(true);

      // A second hello on the same connection is a bad message, nothing more.
      c.send(HELLO);
      expect((await c.next("error")).payload).toEqual({ code: "bad_message", message: expect.stringMatching(/hello was already said/) });
      expect(c.ws.readyState).toBe(WebSocket.OPEN);
      expect(c.pending).toEqual([]);
    });
  });

  describe("bad frames", () => {
    it("each gets an error message; the connection stays open and heartbeats still work", async () => {
      const m = await pair();
      const c = await online(m);

      const bad: [string, () => void, RegExp][] = [
        ["not JSON", () => c.ws.send("{this is not json"), /not JSON/],
        ["no v", () => c.send({ type: "heartbeat", payload: { busy: [] } }), /unsupported protocol version/],
        ["v: 2", () => c.send({ v: 2, type: "heartbeat", payload: { busy: [] } }), /unsupported protocol version 2\b/],
        ["unknown type", () => c.send({ v: 1, type: "make_coffee", payload: {} }), /type/],
        ["malformed payload", () => c.send({ v: 1, type: "heartbeat", payload: { busy: "x" } }), /payload\.busy/],
        ["a binary frame", () => c.ws.send(Buffer.from(JSON.stringify(heartbeat())), { binary: true }), /binary/],
        ["a job_event for an unknown job", () => c.send(workerMessage("job_event", { jobId: "job_nope", event: { type: "text_delta", text: "hi" } })), /no job job_nope/],
      ];
      for (const [what, send, message] of bad) {
        send();
        const err = await c.next("error");
        expect(err.payload.code, what).toBe("bad_message");
        expect(err.payload.message, what).toMatch(message);
        expect(c.ws.readyState, what).toBe(WebSocket.OPEN);
      }

      // Still served: a heartbeat saying ollama is busy shows, and one saying nothing is busy clears it.
      c.send(heartbeat(["ollama"]));
      await until(() => stateOf(m), (s) => s.state === "busy");
      c.send(heartbeat([]));
      const after = await until(() => stateOf(m), (s) => s.state === "online");
      expect(after.runtimes[0].state).toBe("online");
      expect(c.pending).toEqual([]);
      expect(c.ws.readyState).toBe(WebSocket.OPEN);
      expect((await server.fetch("/v1/openapi.json")).status).toBe(200);
    });

    it("ten bad frames close the connection with 4004", async () => {
      const m = await pair();
      const c = await online(m);
      for (let i = 1; i <= 9; i++) {
        c.ws.send(`bad frame ${i}`);
        expect((await c.next("error")).payload.code).toBe("bad_message");
      }
      expect(c.ws.readyState).toBe(WebSocket.OPEN);
      c.ws.send("bad frame 10");
      expect((await c.next("error")).payload.code).toBe("bad_message");
      expect((await c.closed).code).toBe(WORKER_CLOSE.protocolError);
      await until(() => machineRow(m.machineId), (r) => r.connectedInstance === null);
      expect((await server.fetch("/v1/openapi.json")).status).toBe(200);
    });

    it("a frame over 1 MiB closes the connection with 1009; the server keeps serving the same token", async () => {
      const m = await pair();
      const c = await online(m);
      c.ws.send(JSON.stringify({ v: 1, type: "heartbeat", payload: { busy: ["x".repeat(WORKER_MAX_FRAME_BYTES)] } }));
      expect((await c.closed).code).toBe(1009);
      await until(() => machineRow(m.machineId), (r) => r.connectedInstance === null);
      expect((await stateOf(m)).state).toBe("offline");

      expect((await server.fetch("/v1/openapi.json")).status).toBe(200);
      const again = await online(m);
      expect(again.ws.readyState).toBe(WebSocket.OPEN);
      expect((await stateOf(m)).state).toBe("online");
    });
  });

  describe("live state", () => {
    it("a second connection of the same machine that says hello replaces the first (4002); the machine stays online", async () => {
      const m = await pair();
      const first = await online(m);
      const second = await connect(m.token);
      // Connected but silent, the second takes nothing over yet.
      expect(first.ws.readyState).toBe(WebSocket.OPEN);
      second.send(HELLO);
      await second.next("welcome");
      expect((await first.closed).code).toBe(WORKER_CLOSE.replaced);

      // The old connection's close does not take the machine offline: a round trip on the new one, then look.
      second.send(heartbeat(["ollama"]));
      await until(() => stateOf(m), (s) => s.state === "busy");
      second.send(heartbeat([]));
      await until(() => stateOf(m), (s) => s.state === "online");
      expect((await machineRow(m.machineId)).connectedInstance).toBe(server.services.workers.instance);
      expect(server.services.workers.holds(m.machineId)).toBe(true);
      expect(second.ws.readyState).toBe(WebSocket.OPEN);
    });

    it("closing the socket takes the machine offline at once", async () => {
      const m = await pair();
      const c = await online(m);
      expect((await stateOf(m)).state).toBe("online");
      c.ws.close(1000, "bye");
      expect((await c.closed).code).toBe(1000);
      const row = await until(() => machineRow(m.machineId), (r) => r.connectedInstance === null, 2_000);
      expect(row.connectedInstance).toBeNull();
      expect((await stateOf(m)).state).toBe("offline");
      expect(server.services.workers.holds(m.machineId)).toBe(false);
    });
  });
});

describe("worker heartbeats on a server of its own", () => {
  let server: TestServer;
  const open: WebSocket[] = [];

  beforeAll(async () => {
    // A 3 s heartbeat timeout: a silent connection is dropped within seconds of real time.
    server = await startTestServer({ kind: "pglite", dataDir: null }, { WORKER_HEARTBEAT_TIMEOUT_SECONDS: "3" }, { runningClock: true });
  });
  afterEach(() => closeAll(open));
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  it("live state follows the connection: online while heartbeats come (they write nothing to its row); silent past the timeout, closed (4003) and offline at once, last seen when last heard", async () => {
    const m = await pairViaApi(server, server.dev, "heartbeat-user");
    const stateOf = async () => ((await (await server.fetch("/v1/machines", { headers: bearer(m.session) })).json()) as MachineList).data.find((x) => x.id === m.machineId)!;
    const row = () => server.db.prisma.machine.findUniqueOrThrow({ where: { id: m.machineId } });
    const c = await connectTo(server, open, m.token);
    c.send(HELLO);
    await c.next("welcome");
    expect((await stateOf()).state).toBe("online");
    const connectedRow = await row();

    // Beats for 2.5 s: online throughout, the row untouched (its liveness is the connection's, held by a live instance).
    let lastBeat = 0;
    for (let i = 0; i < 5; i++) {
      c.send(heartbeat());
      lastBeat = server.clock.now().getTime();
      await new Promise((r) => setTimeout(r, 500));
      expect((await stateOf()).state).toBe("online");
    }
    expect((await row()).lastHeartbeatAt).toEqual(connectedRow.lastHeartbeatAt);

    // Then silence: closed for it, offline, last seen when last heard.
    const closed = await c.closed;
    expect(closed.code).toBe(WORKER_CLOSE.heartbeatTimeout);
    const silent = await until(stateOf, (s) => s.state === "offline");
    expect(silent.runtimes[0].state).toBe("offline");
    expect(Math.abs(new Date(silent.lastSeenAt!).getTime() - lastBeat)).toBeLessThan(100);
    expect((await row()).connectedInstance).toBeNull();
  });
});

describe("worker connections and the server's own life", () => {
  it("a client that resets while being refused does not crash the server", async () => {
    const server = await startTestServer({ kind: "pglite", dataDir: null });
    try {
      const { port } = new URL(server.url);
      for (let i = 0; i < 50; i++) {
        const sock = net.connect(Number(port), "127.0.0.1");
        await new Promise((r) => sock.once("connect", r));
        sock.write("GET /v1/other HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
        sock.resetAndDestroy();
      }
      await new Promise((r) => setTimeout(r, 300));
      expect((await server.fetch("/v1/openapi.json")).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("shutting down closes every connection at once, hello said or not (1001, going away)", async () => {
    const server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    const open: WebSocket[] = [];
    const m = await pairViaApi(server, server.dev, "shutdown-user");
    const silent = await connectTo(server, open, m.token);
    const started = Date.now();
    await server.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await silent.closed).code).toBe(WORKER_CLOSE.goingAway);
    removeTempDirs();
  });
});

/** A raw worker connection (test/helpers/raw-worker.ts) to this server. */
const connectTo = (server: TestServer, open: WebSocket[], token: string) => connectRawWorker(server.url, token, open);

/** Tries to open a worker connection and returns the plain HTTP answer that refused it. */
function refusalFrom(server: TestServer, headers: Record<string, string>, path: string): Promise<Refusal> {
  const ws = new WebSocket(`${server.url.replace(/^http/, "ws")}${path}`, { headers });
  ws.on("error", () => {});
  return new Promise((resolve, reject) => {
    ws.once("open", () => {
      ws.terminate();
      reject(new Error(`${path} was upgraded with ${JSON.stringify(headers)}`));
    });
    ws.once("unexpected-response", (_req, res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => {
        ws.terminate();
        try {
          resolve({ status: res.statusCode ?? 0, contentType: String(res.headers["content-type"] ?? ""), body: JSON.parse(text) });
        } catch {
          reject(new Error(`the refusal's body is not JSON: ${text}`));
        }
      });
    });
  });
}

const closeAll = closeRawWorkers;

/** Polls `fn` until `ok` says yes (5 s by default: these answers come at once or not at all). */
const until = <T>(fn: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 5_000) => pollUntil(fn, ok, timeoutMs);
