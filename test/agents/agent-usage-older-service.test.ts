import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import WebSocket, { WebSocketServer } from "ws";
import { serverMessage, type JobEvent, type WorkerMessage } from "@svc/contract";
import { spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { startAnthropicStandIn, type AnthropicStandIn } from "../helpers/anthropic-standin.js";
import { CLAUDE_BIN } from "../../scripts/test-tools.mjs";

const CLAUDE = CLAUDE_BIN;

/**
 * A newer worker and an older service: `usage` job events (issue 29) are sent only
 * to a service whose `welcome` lists `job_usage`; an older one (no `features`)
 * would count each as a bad message and close the link after ten. A stand-in
 * service speaks the real protocol to a real `svc-worker start` serving the real
 * Claude Code against the Anthropic stand-in: welcomed without features, the job's
 * events carry no `usage` and its `done` its whole usage; welcomed with them (the
 * control, same worker, next connection), the calls are reported as they go.
 */
let anthropic: AnthropicStandIn;
let service: http.Server;
let wss: WebSocketServer;
let worker: WorkerProcess | null = null;

beforeAll(async () => {
  anthropic = await startAnthropicStandIn();
  service = http.createServer();
  wss = new WebSocketServer({ server: service });
  await new Promise<void>((r) => service.listen(0, "127.0.0.1", r));
});
afterAll(async () => {
  worker?.stop();
  for (const c of wss.clients) c.terminate();
  wss.close();
  await new Promise((r) => service.close(r));
  await anthropic.close();
  removeTempDirs();
});

/** Takes the worker's next connection, welcomes it (with `features` or none), runs one agent job and returns the job's events up to its end. */
async function jobOnNextConnection(features: string[] | undefined, jobId: string): Promise<JobEvent[]> {
  const ws = await new Promise<WebSocket>((resolve) => wss.once("connection", resolve));
  const events: JobEvent[] = [];
  let hello: () => void = () => {};
  const helloSaid = new Promise<void>((r) => (hello = r));
  const ended = new Promise<void>((resolve) =>
    ws.on("message", (d) => {
      const m = JSON.parse(d.toString()) as WorkerMessage;
      if (m.type === "hello") hello();
      if (m.type === "job_event" && m.payload.jobId === jobId) {
        events.push(m.payload.event);
        if (m.payload.event.type === "done" || m.payload.event.type === "failed") resolve();
      }
    }),
  );
  await helloSaid;
  ws.send(JSON.stringify(serverMessage("welcome", { machineId: "mch_standin", heartbeatSeconds: 10, appName: "Stand-in", ...(features ? { features } : {}) })));
  ws.send(JSON.stringify(serverMessage("job", { jobId, job: { kind: "agent_run", runtime: "claude-code", prompt: "Look [[read:notes.txt]] [[usage:100/10]] then answer" } })));
  await ended;
  ws.close();
  return events;
}

it("sends usage events only to a service that announced job_usage; an older one gets the whole usage on done", async () => {
  const port = (service.address() as AddressInfo).port;
  const home = tempDir("svc-worker-home-");
  const workdir = fs.realpathSync(tempDir("svc-usage-work-"));
  fs.writeFileSync(path.join(workdir, "notes.txt"), "line one\n");
  fs.writeFileSync(
    path.join(home, "credentials.json"),
    JSON.stringify({ server: `http://127.0.0.1:${port}`, connectUrl: `ws://127.0.0.1:${port}/v1/worker`, machineId: "mch_standin", pairingToken: "pt_svc_x", environment: "test", appName: "Stand-in", pairedAt: new Date().toISOString() }),
  );
  fs.writeFileSync(
    path.join(home, "config.json"),
    JSON.stringify({
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, codex: false, claude: CLAUDE },
      policy: { agents: { "claude-code": true }, sandbox: { required: false }, env: ["ANTHROPIC_BASE_URL"], providerKeys: ["ANTHROPIC_API_KEY"] },
    }),
  );
  const older = jobOnNextConnection(undefined, "job_older");
  worker = spawnWorker(["start"], home, { HOME: fs.realpathSync(tempDir("svc-usage-home-")), ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-standin" });
  const before = await older;
  expect(before.filter((e) => e.type === "usage")).toEqual([]);
  const end = before.at(-1)!;
  expect(end.type).toBe("done");
  // Two model calls of 100 in / 10 out: the whole of it on the job's end.
  expect(end.type === "done" && [end.usage.inputTokens, end.usage.outputTokens]).toEqual([200, 20]);

  // The same worker reconnects (the stand-in closed the link); welcomed by a service that takes usage events, it reports each call.
  const after = await jobOnNextConnection(["job_usage"], "job_newer");
  const reports = after.filter((e): e is Extract<JobEvent, { type: "usage" }> => e.type === "usage" && !e.partial);
  expect(reports.map((r) => [r.usage.inputTokens, r.usage.outputTokens])).toEqual([
    [100, 10],
    [100, 10],
  ]);
  expect(after.at(-1)?.type).toBe("done");
}, 120_000);
