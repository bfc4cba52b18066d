/**
 * The bare worker of bench/floor.ts: a WebSocket to the bare relay, a model turn run with
 * the worker's own adapter (the same calls as `svc-worker`'s model runtime) for each job,
 * each event sent back as it comes. Nothing else: no validation, no config, no pairing.
 *
 *   node --import tsx bench/floor-worker.ts <relay ws url> <model url>
 */
import { WebSocket } from "ws";
import { modelTurns, type Msg } from "./baseline-loop.js";

const [relayUrl, modelUrl] = process.argv.slice(2);
const turn = modelTurns(modelUrl);
const ws = new WebSocket(relayUrl);
ws.on("open", () => process.stdout.write("connected\n"));
ws.on("message", (data) => {
  const job = JSON.parse(String(data)) as { id: string; messages: Msg[]; model?: string };
  // A chat completion's job names its model and has no tools; a run's turn has the app's tools.
  turn(job.messages, (e) => ws.send(JSON.stringify({ id: job.id, e })), AbortSignal.timeout(60_000), job.model, !job.model).catch((err: Error) =>
    ws.send(JSON.stringify({ id: job.id, e: { type: "failed", code: "floor_worker", message: err.message } })),
  );
});
ws.on("close", () => process.exit(0));
