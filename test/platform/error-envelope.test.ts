import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import fs from "node:fs";
import { Writable } from "node:stream";
import type WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES, RUN_FAILURE_REASONS, RUN_STOP_CODES, RUN_STOP_ERROR_TYPE, WORKER_CONNECT_PATH, type ErrorCode } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { closeRawWorkers, connectWorkerDouble } from "../helpers/raw-worker.js";
import { createLogger } from "../../server/logger.js";
import { callAdminSocket, startAdminSocket } from "../../server/admin/socket.js";
import type { OperationDeps } from "../../server/admin/operations.js";
import { RunStop } from "../../server/runs/run-stop.js";

/**
 * Every emitter of an error answers in the one envelope, built in one place:
 * `{"error":{"type","code","message","requestId"}}`, the type the code's table
 * gives, the request id one that is logged. Emitters: the HTTP error handler, the
 * HTTP parser's refusals (before Express), a chat stream's last frame, a refused
 * worker WebSocket, the admin socket.
 */
type Envelope = { error: { type: string; code: string; message: string; requestId: string } };

/** The envelope's exact shape: these four keys in this order, the type from the code's table. */
function expectEnvelope(body: unknown, code: string): Envelope {
  const e = body as Envelope;
  expect(Object.keys(e)).toEqual(["error"]);
  expect(Object.keys(e.error)).toEqual(["type", "code", "message", "requestId"]);
  expect(e.error.code).toBe(code);
  expect(e.error.type).toBe(code in ERROR_CODES ? ERROR_CODES[code as ErrorCode].type : RUN_STOP_ERROR_TYPE);
  expect(e.error.message).toEqual(expect.any(String));
  expect(e.error.requestId).toMatch(/^req_[A-Za-z0-9]+$/);
  return e;
}

/** Log lines (JSON) naming this request id. */
const loggedWith = (logs: string[], requestId: string) => logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.requestId === requestId);

/** Writes raw bytes to the server and resolves with the status line, headers and body it answered. */
function raw(url: string, request: string): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.write(request));
    let text = "";
    socket.setEncoding("utf8");
    socket.on("data", (c: string) => (text += c));
    socket.on("error", reject);
    socket.on("close", () => {
      const [head, ...rest] = text.split("\r\n\r\n");
      const [statusLine, ...lines] = head.split("\r\n");
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      resolve({ status: Number(statusLine.split(" ")[1]), headers, body: rest.join("\r\n\r\n") });
    });
  });
}

onEachDatabase("one error envelope from every emitter on $db.name", (db) => {
  let server: TestServer;
  const open: WebSocket[] = [];

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
  });
  afterAll(async () => {
    await closeRawWorkers(open);
    await server?.close();
    removeTempDirs();
  });

  it("the HTTP error handler: an unknown route", async () => {
    const res = await server.fetch("/v1/nope");
    expect(res.status).toBe(404);
    const e = expectEnvelope(await res.json(), "route_not_found");
    expect(e.error.requestId).toBe(res.headers.get("request-id"));
  });

  it("body-parser's refusal: malformed JSON", async () => {
    const res = await server.fetch("/v1/runs", { method: "POST", headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, body: "{not json" });
    expect(res.status).toBe(400);
    const e = expectEnvelope(await res.json(), "invalid_json");
    expect(e.error.requestId).toBe(res.headers.get("request-id"));
  });

  it("the HTTP parser's refusal and CONNECT, answered before Express: logged with their request id", async () => {
    const bad = await raw(server.url, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n");
    expect(bad.status).toBe(400);
    const e = expectEnvelope(JSON.parse(bad.body), "invalid_request");
    expect(bad.headers["request-id"]).toBe(e.error.requestId);
    expect(loggedWith(server.logs, e.error.requestId)).toHaveLength(1);

    const connect = await raw(server.url, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    expect(connect.status).toBe(405);
    const c = expectEnvelope(JSON.parse(connect.body), "method_not_allowed");
    expect(connect.headers["request-id"]).toBe(c.error.requestId);
    expect(loggedWith(server.logs, c.error.requestId)).toHaveLength(1);
  });

  it("a refused worker WebSocket: its request id is in the Request-Id header and in the log line of the refusal", async () => {
    const answer = await new Promise<{ status: number; requestId: string | undefined; body: string }>((resolve, reject) => {
      const req = http.request(`${server.url}${WORKER_CONNECT_PATH}`, { headers: { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==" } });
      req.on("response", (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, requestId: res.headers["request-id"] as string | undefined, body }));
      });
      req.on("upgrade", () => reject(new Error("upgraded without a token")));
      req.on("error", reject);
      req.end();
    });
    expect(answer.status).toBe(401);
    const e = expectEnvelope(JSON.parse(answer.body), "missing_credential");
    expect(answer.requestId).toBe(e.error.requestId);
    const lines = loggedWith(server.logs, e.error.requestId);
    expect(lines).toEqual([expect.objectContaining({ msg: "worker connection refused", status: 401, code: "missing_credential" })]);
  });

  it("a chat stream's last frame when the run fails: the envelope with the request's id, the machine's own code relayed", async () => {
    const paired = await pairViaApi(server, server.dev, "erin");
    await connectWorkerDouble(
      server.url,
      paired.token,
      () => [
        { type: "text_delta", text: "Half" },
        { type: "failed", code: "api_error_529", message: "the model API is overloaded" },
      ],
      undefined,
      open,
    );
    const res = await server.fetch("/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", user: "erin", stream: true, messages: [{ role: "user", content: "tell me" }] }),
    });
    expect(res.status).toBe(200);
    const frames = (await res.text())
      .split("\n\n")
      .filter((f) => f.startsWith("data: "))
      .map((f) => f.slice(6));
    expect(frames).not.toContain("[DONE]");
    const e = expectEnvelope(JSON.parse(frames.at(-1)!), "api_error_529");
    // OpenAI clients read error.type, error.code and error.message: the type of a failure on the serving side.
    expect(e.error.type).toBe("api_error");
    expect(e.error.message).toBe("The user's runtime failed: the model API is overloaded");
    expect(e.error.requestId).toBe(res.headers.get("request-id"));
    const run = await server.db.prisma.run.findUniqueOrThrow({ where: { id: res.headers.get("service-run-id")! } });
    expect([run.status, run.stopReason, (run.error as { code?: string } | null)?.code]).toEqual(["failed", "runtime_error", "api_error_529"]);
  });
});

describe("the admin socket answers errors in the envelope", () => {
  const logs: string[] = [];
  const logger = createLogger("info", new Writable({ write: (c, _e, cb) => (logs.push(String(c)), cb()) }));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-admin-"));
  const socket = path.join(dir, "admin.sock");
  let stop: () => Promise<void>;

  beforeAll(async () => {
    const deps = {
      keys: {
        listApps: async () => {
          throw new Error("the disk is on fire");
        },
      },
      owners: {},
      baseUrl: "http://localhost",
    } as unknown as OperationDeps;
    stop = await startAdminSocket(socket, deps, logger);
  });
  afterAll(async () => {
    await stop?.();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const post = (op: string, body: string) =>
    new Promise<{ status: number; body: unknown }>((resolve, reject) => {
      const req = http.request({ socketPath: socket, method: "POST", path: `/${op}`, headers: { "content-type": "application/json" } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      });
      req.on("error", reject);
      req.end(body);
    });

  it("an unknown operation, bad arguments, malformed JSON, a failure of the service: each in the envelope, with a logged request id", async () => {
    const unknown = await post("apps.explode", "{}");
    expect(unknown.status).toBe(400);
    expect(expectEnvelope(unknown.body, "invalid_request").error.message).toBe("Unknown operation apps.explode.");

    const badArgs = await post("keys.list", "{}");
    expectEnvelope(badArgs.body, "invalid_request");

    const badJson = await post("apps.list", "{nope");
    expect(badJson.status).toBe(400);
    expectEnvelope(badJson.body, "invalid_json");

    const crash = await post("apps.list", "{}");
    expect(crash.status).toBe(500);
    const e = expectEnvelope(crash.body, "internal_error");
    expect(e.error.message).not.toContain("fire");
    expect(loggedWith(logs, e.error.requestId)).toEqual([expect.objectContaining({ level: 50, msg: "admin operation failed" })]);
    for (const b of [unknown, badArgs, badJson]) expect(loggedWith(logs, (b.body as Envelope).error.requestId)).toHaveLength(1);
  });

  it("the CLI's client reads the envelope's message", async () => {
    await expect(callAdminSocket(socket, "apps.explode", {})).rejects.toThrow(/^Unknown operation apps\.explode\.$/);
  });
});

describe("run stop codes come from the contract's table", () => {
  it("every failure reason has a code, and each code says its reason", () => {
    expect(new Set(Object.values(RUN_STOP_CODES).map((c) => c.stopReason))).toEqual(new Set(RUN_FAILURE_REASONS));
    const stop = new RunStop("spend_ceiling_reached");
    expect([stop.code, stop.stopReason, stop.message]).toEqual(["spend_ceiling_reached", "spend_ceiling", RUN_STOP_CODES.spend_ceiling_reached.message]);
  });

  it("a machine's own code is relayed under runtime_error; worker_lost is the lost link, whoever says it", () => {
    const relayed = RunStop.reported({ code: "api_error_500", message: "m" });
    expect([relayed.code, relayed.stopReason]).toEqual(["api_error_500", "runtime_error"]);
    const lost = RunStop.reported({ code: "worker_lost", message: "m" });
    expect([lost.code, lost.stopReason]).toEqual(["worker_lost", "worker_lost"]);
    // A code of the table said by the machine is still the machine's failure.
    const claimed = RunStop.reported({ code: "max_turns", message: "m" });
    expect([claimed.code, claimed.stopReason]).toEqual(["max_turns", "runtime_error"]);
  });
});
