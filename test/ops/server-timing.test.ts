import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import type WebSocket from "ws";
import { workerMessage, type JobEvent } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pairViaApi } from "../helpers/worker.js";
import { closeRawWorkers, connectRawWorker } from "../helpers/raw-worker.js";

/**
 * `Server-Timing` on every answer (issue 30): the whole time, the service's own, the
 * database's and the time spent waiting on the end user's machine, each a metric a browser's
 * developer tools and any client can read.
 */

type Timing = Record<string, { dur: number; desc?: string }>;

/** Parses a Server-Timing header (the grammar of https://w3c.github.io/server-timing/, as the test needs it). */
function parseTiming(header: string | null): Timing {
  expect(header, "a Server-Timing header").toBeTruthy();
  const out: Timing = {};
  for (const metric of header!.split(",")) {
    const [name, ...params] = metric.trim().split(";");
    const p = Object.fromEntries(params.map((x) => x.split("=")).map(([k, v]) => [k.trim(), v?.trim().replace(/^"|"$/g, "")]));
    out[name.trim()] = { dur: Number(p.dur), desc: p.desc };
  }
  return out;
}

const hello = workerMessage("hello", { client: "timing-test", version: "0", runtimes: [{ name: "ollama", kind: "model", costClass: "user_hardware", models: ["m1"] }] });
const event = (jobId: string, e: JobEvent) => workerMessage("job_event", { jobId, event: e });

onEachDatabase("Server-Timing on $db.name", (db) => {
  let server: TestServer;
  const open: WebSocket[] = [];
  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
  }, 60_000);
  afterEach(() => closeRawWorkers(open));
  afterAll(async () => {
    await server?.close();
  });
  const app = () => ({ authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" });

  it("every answer carries it, errors too: total, svc, db and machine, the parts never more than the whole", async () => {
    for (const [path, init, status] of [
      ["/healthz", {}, 200],
      ["/readyz", {}, 200],
      ["/v1/plans", { headers: app() }, 200],
      ["/v1/plans", { headers: { authorization: "Bearer sk_svc_nope.nope" } }, 401],
      ["/v1/no-such-route", { headers: app() }, 404],
    ] as const) {
      const res = await server.fetch(path, init);
      expect(res.status, path).toBe(status);
      const t = parseTiming(res.headers.get("server-timing"));
      expect(Object.keys(t), path).toEqual(["total", "svc", "db", "machine"]);
      expect(t.db.desc).toBe("database");
      expect(t.machine.desc).toBe("end user's machine");
      for (const m of Object.values(t)) expect(m.dur, path).toBeGreaterThanOrEqual(0);
      expect(t.svc.dur + t.db.dur + t.machine.dur, path).toBeLessThanOrEqual(t.total.dur + 0.2);
    }
    // Positive control for db: a route that reads the database shows time there; liveness, which never asks it, shows none.
    expect(parseTiming((await server.fetch("/readyz")).headers.get("server-timing")).db.dur).toBeGreaterThan(0);
    expect(parseTiming((await server.fetch("/v1/plans", { headers: app() })).headers.get("server-timing")).db.dur).toBeGreaterThan(0);
    expect(parseTiming((await server.fetch("/healthz")).headers.get("server-timing")).db.dur).toBe(0);
  });

  it("a chat completion answered by the user's machine: the machine's 300 ms are its machine time; svc/echo has none", async () => {
    const m = await pairViaApi(server, server.dev, "timed-user");
    const w = await connectRawWorker(server.url, m.token, open);
    w.send(hello);
    await w.next("welcome");
    // The machine answers each job 300 ms after it came.
    w.take("job", (msg) => {
      setTimeout(() => w.send(event(msg.payload.jobId, { type: "done", finishReason: "stop", output: "slow hello", usage: { inputTokens: 2, outputTokens: 2 } })), 300);
    });
    const res = await server.fetch("/v1/chat/completions", { method: "POST", headers: app(), body: JSON.stringify({ model: "m1", user: "timed-user", messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content).toBe("slow hello");
    const t = parseTiming(res.headers.get("server-timing"));
    expect(t.machine.dur).toBeGreaterThanOrEqual(295);
    expect(t.machine.dur).toBeLessThan(t.total.dur);
    expect(t.db.dur).toBeGreaterThan(0);
    expect(t.svc.dur).toBeGreaterThanOrEqual(0);

    const echo = await server.fetch("/v1/chat/completions", { method: "POST", headers: app(), body: JSON.stringify({ model: "svc/echo", user: "timed-user", messages: [{ role: "user", content: "hi" }] }) });
    expect(echo.status).toBe(200);
    expect(parseTiming(echo.headers.get("server-timing")).machine.dur).toBe(0);
  });

  it("a stream says the time up to its first byte", async () => {
    const res = await server.fetch("/v1/chat/completions", { method: "POST", headers: app(), body: JSON.stringify({ model: "svc/echo", user: "timed-user", stream: true, messages: [{ role: "user", content: "one two" }] }) });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
    const t = parseTiming(res.headers.get("server-timing"));
    expect(t.total.dur).toBeGreaterThan(0);
    await res.text();
  });
});
