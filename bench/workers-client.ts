/**
 * A child of bench/workers.ts: many paired machines' connections in one process,
 * each speaking the real worker protocol (contract/src/worker.ts) as `svc-worker`
 * does (worker/src/connection.ts): the pairing token in the handshake, `hello`
 * with its runtimes, then a `heartbeat` (with a ping when `pingDue`) every `heartbeatSeconds`
 * the `welcome` told, and on any drop a reconnect with the worker's own backoff
 * (0.5 s doubling to 30 s, full jitter, reset once welcomed).
 *
 *   node --conditions=svc-source --import tsx bench/workers-client.ts <server url> <tokens file>
 *
 * The tokens file has one pairing token a line. The first connections open at
 * most `SVC_BENCH_CONNECTING` (256) at a time; reconnects are paced by the backoff
 * only, as a fleet's are after a restart. Prints `connected <n>` whenever the
 * number of welcomed connections changed (at most every 100 ms).
 */
import fs from "node:fs";
import WebSocket from "ws";
import { pingDue, WORKER_CONNECT_PATH, workerMessage, type RuntimeAdvert } from "@svc/contract";

const [url, tokensFile] = process.argv.slice(2);
const tokens = fs.readFileSync(tokensFile, "utf8").split("\n").filter(Boolean);
const CONNECTING = Number(process.env.SVC_BENCH_CONNECTING ?? 256);
const RUNTIMES: RuntimeAdvert[] = [{ name: "ollama", kind: "model", costClass: "user_hardware", models: ["llama3.2:3b"] }];
const connectUrl = `${url.replace(/^http/, "ws")}${WORKER_CONNECT_PATH}`;

let connected = 0;
let refused = 0;
let printed = -1;
setInterval(() => {
  if (connected !== printed) {
    printed = connected;
    process.stdout.write(`connected ${connected} refused ${refused}\n`);
  }
}, 100);

/** One machine: connects, and reconnects whenever its connection drops (stops when refused for good). */
function machine(token: string, first: () => void): void {
  let attempt = 0;
  let once = true;
  const connect = () => {
    const ws = new WebSocket(connectUrl, { headers: { authorization: `Bearer ${token}` }, handshakeTimeout: 15_000 });
    let welcomed = false;
    let beat: NodeJS.Timeout | null = null;
    const done = () => {
      if (once) (once = false), first();
    };
    ws.on("open", () => ws.send(JSON.stringify(workerMessage("hello", { client: "svc-worker", version: "bench", runtimes: RUNTIMES }))));
    let heardAt = Date.now();
    ws.on("pong", () => (heardAt = Date.now()));
    ws.on("message", (data: Buffer) => {
      heardAt = Date.now();
      const m = JSON.parse(data.toString("utf8")) as { type: string; payload: { heartbeatSeconds?: number } };
      if (m.type === "welcome" && !welcomed) {
        welcomed = true;
        attempt = 0;
        connected++;
        done();
        const beatMs = m.payload.heartbeatSeconds! * 1000;
        beat = setInterval(() => {
          if (pingDue(Date.now() - heardAt, beatMs)) ws.ping();
          ws.send(JSON.stringify(workerMessage("heartbeat", { busy: [] })));
        }, beatMs);
      }
    });
    ws.on("error", () => {});
    ws.on("close", (code) => {
      if (beat) clearInterval(beat);
      if (welcomed) connected--;
      done();
      // 4001: the machine was removed; the worker stops for good.
      if (code === 4001) return void refused++;
      const wait = Math.round(Math.random() * Math.min(30_000, 500 * 2 ** attempt++));
      setTimeout(connect, wait);
    });
  };
  connect();
}

// The first connections, at most CONNECTING opening at once.
let next = 0;
const start = () => {
  if (next < tokens.length) machine(tokens[next++], start);
};
for (let i = 0; i < Math.min(CONNECTING, tokens.length); i++) start();
