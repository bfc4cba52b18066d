/**
 * The load client of bench/chat.ts, in a process of its own so the servers being
 * measured (in the bench process) are not sharing their event loop with it.
 * Takes one JSON spec as its argument, prints `RESULT <json>` and exits.
 *
 *  - `{ mode: "rps", url, headers, body, concurrency, warmSeconds, seconds }`:
 *    `concurrency` requests kept in flight on keep-alive connections; after the
 *    warm-up, the requests answered inside the window are counted, with their
 *    latency and status; `{k}` in the body is replaced by the number (0..concurrency-1)
 *    of the loop sending it.
 *  - `{ mode: "streams", url, headers, body, count, timeoutMs }`: `count` streamed
 *    completions started at once (`{i}` in the body replaced by the stream's
 *    number), each read to its end; one result per stream.
 */
import http from "node:http";
import { performance } from "node:perf_hooks";
import { post, stream } from "./chat-client.js";

interface RpsSpec {
  mode: "rps";
  url: string;
  headers: Record<string, string>;
  body: string;
  concurrency: number;
  warmSeconds: number;
  seconds: number;
}
interface StreamsSpec {
  mode: "streams";
  url: string;
  headers: Record<string, string>;
  body: string;
  count: number;
  timeoutMs: number;
}

const spec = JSON.parse(process.argv[2]) as RpsSpec | StreamsSpec;

async function rps(s: RpsSpec) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: s.concurrency });
  const started = performance.now();
  const from = started + s.warmSeconds * 1000;
  const until = from + s.seconds * 1000;
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  let total = 0;
  /** Every 200, warm-up and the requests finishing after the window included: what was served. */
  let okTotal = 0;
  let errors = 0;
  let firstError = "";
  let cpuFrom = 0;
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const mark = setTimeout(() => (cpuFrom = cpu()), from - started);
  await Promise.all(
    Array.from({ length: s.concurrency }, async (_, k) => {
      const body = s.body.replaceAll("{k}", String(k));
      while (performance.now() < until) {
        const t = performance.now();
        let status = 0;
        try {
          const a = await post(agent, s.url, s.headers, body);
          status = a.status;
          if (status === 200) okTotal++;
          if (status !== 200 && !firstError) firstError = `HTTP ${status}: ${a.text.slice(0, 300)}`;
        } catch (err) {
          errors++;
          if (!firstError) firstError = (err as Error).message;
        }
        total++;
        const now = performance.now();
        if (t >= from && now <= until) {
          latencies.push(now - t);
          statuses[status] = (statuses[status] ?? 0) + 1;
        }
      }
    }),
  );
  clearTimeout(mark);
  const clientCpuMs = cpu() - cpuFrom;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.max(0, Math.ceil((p / 100) * latencies.length) - 1))];
  return { counted: latencies.length, perSecond: (statuses["200"] ?? 0) / s.seconds, total, okTotal, wallMs: performance.now() - started, errors, firstError, statuses, median: pct(50), p99: pct(99), clientCpuMs };
}

async function streams(s: StreamsSpec) {
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const started = performance.now();
  const results = await Promise.all(Array.from({ length: s.count }, (_, i) => stream(agent, s.url, s.headers, s.body.replaceAll("{i}", String(i)), s.timeoutMs)));
  return { results, wallMs: performance.now() - started };
}

const result = spec.mode === "rps" ? await rps(spec) : await streams(spec);
// Exits once the line is written: a result of 1,000 streams (200 KB) is more than a pipe holds, and an exit
// right after the write cut it short.
process.stdout.write(`RESULT ${JSON.stringify(result)}\n`, () => process.exit(0));
