import fs from "node:fs";
import path from "node:path";
import type { AddressInfo } from "node:net";
import type { IncomingMessage } from "node:http";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { WebSocketServer, type WebSocket } from "ws";
import { serverMessage, WORKER_CLOSE, WORKER_MAX_JOB_FRAME_BYTES, WorkerMessage, parseFrame } from "@svc/contract";
import { spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs, tempDir, until as waitFor } from "../helpers/process.js";

/**
 * The worker's side of the catalog, checked against a stand-in service: a real
 * `svc-worker start` connects to a WebSocket server the test controls, which
 * sends it what a broken or hostile service might.
 */
describe("svc-worker against a stand-in service", () => {
  const workers: WorkerProcess[] = [];
  const servers: WebSocketServer[] = [];
  afterEach(() => {
    for (const w of workers.splice(0)) w.stop();
    for (const s of servers.splice(0)) s.close();
  });
  afterAll(() => removeTempDirs());

  /** A service stand-in; resolves each connection with its handshake request and a queue of parsed worker messages. */
  async function standInService() {
    const wss = new WebSocketServer({ port: 0, host: "127.0.0.1" });
    servers.push(wss);
    await new Promise((r) => wss.once("listening", r));
    const connections: { ws: WebSocket; req: IncomingMessage; messages: WorkerMessage[]; raw: string[] }[] = [];
    wss.on("connection", (ws, req) => {
      const c = { ws, req, messages: [] as WorkerMessage[], raw: [] as string[] };
      connections.push(c);
      ws.on("message", (data) => {
        c.raw.push(data.toString());
        const parsed = parseFrame(WorkerMessage, data.toString());
        if (parsed.ok) c.messages.push(parsed.message);
      });
    });
    return { url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/v1/worker`, connections };
  }

  function startAgainst(url: string) {
    const home = tempDir("svc-worker-home-");
    const token = `pt_svc_${"A".repeat(43)}`;
    fs.writeFileSync(path.join(home, "credentials.json"), JSON.stringify({ server: "http://127.0.0.1:1", connectUrl: url, machineId: "mch_test", pairingToken: token, environment: "test", appName: "Stand-in", pairedAt: new Date().toISOString() }));
    fs.writeFileSync(path.join(home, "config.json"), JSON.stringify({ runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: false } }));
    const w = spawnWorker(["start"], home);
    workers.push(w);
    return { w, token };
  }

  const until = (check: () => boolean) => waitFor(check, 15_000);

  it("sends its token only in the handshake header, says hello in the catalog's envelope, and heartbeats at the interval it is told", async () => {
    const svc = await standInService();
    const { w, token } = startAgainst(svc.url);
    await until(() => svc.connections[0]?.messages.length > 0);
    const c = svc.connections[0];
    expect(c.req.headers.authorization).toBe(`Bearer ${token}`);
    expect(c.req.url).toBe("/v1/worker");
    expect(c.messages[0]).toEqual({ v: 1, type: "hello", payload: { client: "svc-worker", version: "0.1.0", runtimes: [], maxJobFrameBytes: WORKER_MAX_JOB_FRAME_BYTES, features: ["job_resume", "sessions"] } });
    c.ws.send(JSON.stringify(serverMessage("welcome", { machineId: "mch_test", heartbeatSeconds: 1, appName: "Stand-in" })));
    await w.waitFor(/Connected to Stand-in as mch_test/);
    const sentAt = Date.now();
    await until(() => c.messages.filter((m) => m.type === "heartbeat").length >= 2);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(1900);
    expect(c.messages.find((m) => m.type === "heartbeat")).toEqual({ v: 1, type: "heartbeat", payload: { busy: [] } });
  });

  it("answers whatever a service should not send with an error message, and keeps serving", async () => {
    const svc = await standInService();
    const { w } = startAgainst(svc.url);
    await until(() => svc.connections[0]?.messages.length > 0);
    const c = svc.connections[0];
    c.ws.send(JSON.stringify(serverMessage("welcome", { machineId: "mch_test", heartbeatSeconds: 30, appName: "Stand-in" })));
    await w.waitFor(/Connected/);
    const errorsBefore = () => c.messages.filter((m) => m.type === "error");
    c.ws.send("not json");
    c.ws.send(JSON.stringify({ v: 9, type: "welcome", payload: {} }));
    c.ws.send(JSON.stringify({ v: 1, type: "run_this_shell_command", payload: { command: "rm -rf /" } }));
    c.ws.send(JSON.stringify({ v: 1, type: "job", payload: { jobId: "j1", job: { kind: "shell", command: "id" } } }));
    await until(() => errorsBefore().length === 4);
    expect(errorsBefore().map((m) => (m.payload as { code: string }).code)).toEqual(["bad_message", "bad_message", "bad_message", "bad_message"]);
    expect((errorsBefore()[1].payload as { message: string }).message).toMatch(/unsupported protocol version 9/);
    // A well-formed job for a runtime it does not serve is refused as a job, not run.
    c.ws.send(JSON.stringify(serverMessage("job", { jobId: "j2", job: { kind: "agent_run", runtime: "claude-code", prompt: "anything" } })));
    await until(() => c.messages.some((m) => m.type === "job_event"));
    expect(c.messages.find((m) => m.type === "job_event")).toEqual({ v: 1, type: "job_event", payload: { jobId: "j2", event: { type: "failed", code: "unknown_runtime", message: "This machine does not serve claude-code." } } });
    expect(w.child.exitCode).toBeNull();
  });

  it("reconnects after the service drops it, but stops for good when told the machine was removed", async () => {
    const svc = await standInService();
    const { w } = startAgainst(svc.url);
    await until(() => svc.connections.length === 1 && svc.connections[0].messages.length > 0);
    svc.connections[0].ws.close(WORKER_CLOSE.goingAway, "restarting");
    await until(() => svc.connections.length === 2 && svc.connections[1].messages.length > 0);
    expect(w.stdout).toMatch(/connection lost \(restarting\); reconnecting in/);
    svc.connections[1].ws.close(WORKER_CLOSE.revoked, "this machine was removed");
    expect((await w.exited).code).toBe(1);
    expect(w.stdout).toMatch(/This machine was removed from Stand-in: this machine was removed\. Pair it again/);
    expect(svc.connections).toHaveLength(2);
  });
});
