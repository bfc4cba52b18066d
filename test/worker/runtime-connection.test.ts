import http from "node:http";
import net from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Job, JobEvent } from "@svc/contract";
import { OpenAICompatibleRuntime } from "../../worker/src/runtimes/openai-compatible.js";
import type { JobContext } from "../../worker/src/runtimes/runtime.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";

/**
 * The worker's link to a model runtime: one kept-alive connection reused turn
 * after turn (counted at a TCP relay in front of the model stand-in), and the
 * runtime's failures said as before (unreachable, an error status, a broken or
 * cancelled stream).
 */

interface Relay {
  url: string;
  /** Connections made through it so far. */
  connections(): number;
  /** Closes every connection open now (a runtime closing its idle connections). */
  drop(): void;
  /** The next request on a connection already used is answered by a reset (the runtime closed it just as it was picked). */
  resetNextReuse(): void;
  close(): Promise<void>;
}

/** A TCP relay to `target` that counts the connections made through it. */
async function countingRelay(target: string): Promise<Relay> {
  const { hostname, port } = new URL(target);
  let connections = 0;
  let resetReuse = false;
  const clients = new Set<net.Socket>();
  const relay = net.createServer((client) => {
    connections++;
    clients.add(client);
    const upstream = net.connect(Number(port), hostname);
    let requests = 0;
    client.on("data", (data) => {
      if (data.includes("HTTP/1.1\r\n") && requests++ > 0 && resetReuse) {
        resetReuse = false;
        upstream.destroy();
        return void client.resetAndDestroy();
      }
      upstream.write(data);
    });
    upstream.pipe(client);
    for (const s of [client, upstream]) {
      s.on("error", () => {});
      s.on("close", () => (clients.delete(client), client.destroy(), upstream.destroy()));
    }
  });
  await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
  const drop = () => clients.forEach((s) => s.destroy());
  return {
    url: `http://127.0.0.1:${(relay.address() as AddressInfo).port}`,
    connections: () => connections,
    drop,
    resetNextReuse: () => (resetReuse = true),
    close: () => new Promise((r) => (drop(), relay.close(() => r()))),
  };
}

const turn = (content = "hi"): Job => ({ kind: "model_turn", runtime: "ollama", model: "llama3.2:3b", messages: [{ role: "user", content }] });
const advert = { name: "ollama", kind: "model" as const, costClass: "user_hardware" as const, models: ["llama3.2:3b"] };

/** Runs one job on the runtime in this process; its events. */
async function runTurn(runtime: OpenAICompatibleRuntime, job: Job, signal = new AbortController().signal): Promise<JobEvent[]> {
  const events: JobEvent[] = [];
  await runtime.run(job, { emit: (e) => events.push(e), signal } as Pick<JobContext, "emit" | "signal"> as JobContext);
  return events;
}

describe("the worker's connection to a model runtime", () => {
  let model: ModelStandIn;
  const closers: (() => Promise<void>)[] = [];
  beforeAll(async () => {
    model = await startModelStandIn();
  });
  afterAll(async () => {
    for (const close of closers) await close();
    await model?.close();
  });

  it("keeps one connection alive across turns", async () => {
    const relay = await countingRelay(model.url);
    closers.push(relay.close);
    const runtime = new OpenAICompatibleRuntime(advert, relay.url);
    for (let i = 0; i < 5; i++) {
      const events = await runTurn(runtime, turn());
      expect(events.at(-1)).toEqual({ type: "done", finishReason: "stop", output: "Hello from the stand-in model.", usage: { inputTokens: 12, outputTokens: 7 } });
    }
    expect(relay.connections()).toBe(1);
    expect(model.requests.at(-1)).toMatchObject({ model: "llama3.2:3b", stream: true, stream_options: { include_usage: true } });
  });

  it("takes a new connection when the runtime closed the kept one, also just as it was picked", async () => {
    const relay = await countingRelay(model.url);
    closers.push(relay.close);
    const runtime = new OpenAICompatibleRuntime(advert, relay.url);
    const done = { type: "done", output: "Hello from the stand-in model." };
    expect((await runTurn(runtime, turn())).at(-1)).toMatchObject(done);
    // Closed while idle: the next turn opens a new connection.
    relay.drop();
    await new Promise((r) => setTimeout(r, 50));
    expect((await runTurn(runtime, turn())).at(-1)).toMatchObject(done);
    expect(relay.connections()).toBe(2);
    // Reset as the next request went out on it: sent again, once, on a new connection.
    const asked = model.requests.length;
    relay.resetNextReuse();
    expect(await runTurn(runtime, turn("again"))).toContainEqual(expect.objectContaining(done));
    expect(relay.connections()).toBe(3);
    expect(model.requests.length - asked).toBe(1);
  });

  it("says what went wrong: unreachable, an error status, a chunk that is not JSON, a broken stream, a cancel", async () => {
    // Nothing listens there.
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const unreachable = await runTurn(new OpenAICompatibleRuntime(advert, `http://127.0.0.1:${port}`), turn());
    expect(unreachable).toEqual([{ type: "failed", code: "runtime_unreachable", message: expect.stringMatching(/^ollama did not answer: .*ECONNREFUSED/) }]);

    let mode = "";
    const odd = http.createServer((req, res) => {
      req.resume();
      if (mode === "status") return void res.writeHead(503, { "content-type": "application/json" }).end('{"error":"model is loading"}');
      res.writeHead(200, { "content-type": "text/event-stream" });
      const chunk = (content: string) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content } }] })}\n\n`;
      if (mode === "garbage") return void res.end(`${chunk("a")}data: {not json\n\n`);
      if (mode === "broken") return void res.write(chunk("partial"), () => res.destroy());
      // "slow": one piece, then nothing until the client goes away.
      res.write(chunk("thinking"));
    });
    await new Promise<void>((r) => odd.listen(0, "127.0.0.1", r));
    closers.push(() => new Promise((r) => (odd.closeAllConnections(), odd.close(() => r()))));
    const runtime = new OpenAICompatibleRuntime(advert, `http://127.0.0.1:${(odd.address() as AddressInfo).port}`);

    mode = "status";
    expect(await runTurn(runtime, turn())).toEqual([{ type: "failed", code: "runtime_error", message: 'ollama answered 503: {"error":"model is loading"}' }]);
    mode = "garbage";
    expect((await runTurn(runtime, turn())).at(-1)).toEqual({ type: "failed", code: "runtime_error", message: "ollama sent a chunk that is not JSON: {not json" });
    mode = "broken";
    const broken = await runTurn(runtime, turn());
    expect(broken[0]).toEqual({ type: "text_delta", text: "partial" });
    expect(broken.at(-1)).toMatchObject({ type: "failed", code: "runtime_error", message: expect.stringMatching(/^The stream from ollama broke: /) });
    mode = "slow";
    const abort = new AbortController();
    const events: JobEvent[] = [];
    const running = runtime.run(turn(), { emit: (e) => (events.push(e), e.type === "text_delta" && abort.abort()), signal: abort.signal } as Pick<JobContext, "emit" | "signal"> as JobContext);
    await running;
    expect(events).toEqual([
      { type: "text_delta", text: "thinking" },
      { type: "failed", code: "cancelled", message: "The job was cancelled." },
    ]);
    // The runtime still answers after all that, on a connection of its own.
    mode = "status";
    expect(await runTurn(runtime, turn())).toMatchObject([{ type: "failed", code: "runtime_error" }]);
  });
});

describe("a real svc-worker's connection to its model runtime", () => {
  let server: TestServer;
  let model: ModelStandIn;
  let relay: Awaited<ReturnType<typeof countingRelay>>;
  const workers: WorkerProcess[] = [];

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    model = await startModelStandIn();
    relay = await countingRelay(model.url);
  });
  afterEach(() => {
    for (const w of workers.splice(0)) w.stop();
  });
  afterAll(async () => {
    await server?.close();
    await relay?.close();
    await model?.close();
    removeTempDirs();
  });

  it("serves several turns on one connection to the runtime", async () => {
    const m = await pairViaApi(server, server.dev, "dana", { runtimes: { ollama: relay.url, llamacpp: false, lmstudio: false } });
    const w = spawnWorker(["start"], m.home);
    workers.push(w);
    await w.waitFor(/Connected/);
    await pollUntil(
      async () => server.services.workers.holds(m.machineId),
      (held) => held,
    );
    // Finding the runtime (its model list) took connections of its own; from here on, turns only.
    const before = relay.connections();
    const owner = await server.db.prisma.machine.findUniqueOrThrow({ where: { id: m.machineId } });
    for (let i = 0; i < 5; i++) {
      const events = await new Promise<JobEvent[]>((resolve) => {
        const seen: JobEvent[] = [];
        server.services.workers.dispatch({ appId: owner.appId, environment: owner.environment, endUserId: owner.endUserId }, m.machineId, turn(`turn ${i}`), (e) => {
          seen.push(e);
          if (e.type === "done" || e.type === "failed") resolve(seen);
        });
      });
      expect(events.at(-1)).toMatchObject({ type: "done", output: "Hello from the stand-in model." });
    }
    expect(relay.connections() - before).toBeLessThanOrEqual(1);
  });
});
