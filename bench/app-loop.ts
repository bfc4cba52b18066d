/**
 * The app's side of a run, shared by bench/runs.ts and bench/instances.ts: the
 * run (a prompt, three tool round trips, a final answer), the tools the app calls,
 * the loop through the service with raw fetch and SSE, and the measures over it
 * (a warm-up run, N runs kept in flight for a window).
 */
import { performance } from "node:perf_hooks";
import { sseFrames } from "../test/helpers/sse.js";

/** A run that takes longer than this fails the bench (something is stuck). */
export const RUN_TIMEOUT_MS = 30_000;

export const PROMPT = "Plan my afternoon in Paris.";
/** The app's tools, called in the bench process on every path. */
export const TOOLS: Record<string, (args: unknown) => unknown> = {
  weather: () => ({ temp: 21, sky: "clear" }),
  museums: () => ({ open: ["Louvre", "Orsay"] }),
  cafes: () => ({ near: ["Café de Flore"] }),
};
export const TOOL_SPECS = Object.keys(TOOLS).map((name) => ({ name, parameters: { type: "object", properties: { city: { type: "string" } } } }));
export const ROUND_TRIPS = TOOL_SPECS.length;

/** Round trip times, ms. */
export type Samples = number[];
/** One run; its round trips pushed to `samples` when given. */
export type Loop = (samples: Samples | null) => Promise<void>;

/**
 * The app's side of a run through the service: raw fetch and SSE, tool results posted as calls
 * come, all to `server.url` (an instance, or a balancer in front of several). A round trip is
 * timed from the tool's result being ready (just before it is posted) to the next `tool_call`
 * frame (or `run_completed`) in hand.
 */
export function serviceLoop(server: { url: string; appKey: string }, user: string): Loop {
  const headers = { authorization: `Bearer ${server.appKey}`, "content-type": "application/json" };
  const body = JSON.stringify({ user, prompt: PROMPT, tools: TOOL_SPECS, route: { prefer: ["user-hardware"] } });
  return async function run(samples: Samples | null): Promise<void> {
    const res = await fetch(`${server.url}/v1/runs`, { method: "POST", headers, body, signal: AbortSignal.timeout(RUN_TIMEOUT_MS) });
    if (res.status !== 200) throw new Error(`POST /v1/runs answered ${res.status}: ${await res.text()}`);
    const runId = res.headers.get("service-run-id");
    // Each post settles to its failure or null, so none is left rejected if the stream fails first.
    const posts: Promise<string | null>[] = [];
    let ready = 0;
    let toolCalls = 0;
    let completed = false;
    for await (const f of sseFrames(res)) {
      if (f.event === "tool_call" || f.event === "run_completed") {
        if (ready) samples?.push(performance.now() - ready);
        ready = 0;
      }
      if (f.event === "tool_call") {
        const { callId, name, arguments: args } = f.data as { callId: string; name: string; arguments: unknown };
        const result = TOOLS[name](args);
        toolCalls++;
        ready = performance.now();
        posts.push(
          fetch(`${server.url}/v1/runs/${runId}/tool_result`, { method: "POST", headers, body: JSON.stringify({ callId, result }) })
            .then(async (r) => (r.status === 200 ? (await r.arrayBuffer(), null) : `tool_result answered ${r.status}: ${await r.text()}`))
            .catch((err: Error) => `tool_result failed: ${err.message} (${(err.cause as Error | undefined)?.message ?? ""})`),
        );
      } else if (f.event === "run_completed") completed = true;
      else if (f.event === "run_failed" || f.event === "run_cancelled") throw new Error(`run ${runId} ended with ${f.event}: ${JSON.stringify(f.data)}`);
    }
    const failed = (await Promise.all(posts)).filter((e) => e !== null);
    if (failed.length) throw new Error(`run ${runId}: ${failed.join("; ")}`);
    if (!completed || toolCalls !== ROUND_TRIPS) throw new Error(`run ${runId}: completed=${completed}, ${toolCalls} tool calls`);
  };
}

/**
 * A warm-up run, tried twice: the first requests after a pause may meet a
 * keep-alive connection the other side is closing just then (a client race, not
 * the service's doing). Measured runs are never retried.
 */
export async function warmUp(loop: Loop): Promise<void> {
  await loop(null).catch(() => loop(null));
}

/**
 * `parallel` runs kept in flight: a warm-up of `warmSeconds` and at least as many
 * completed runs as are in flight (so the window starts in a steady state, not with
 * every run still at its start; a failure there is tolerated, see warmUp), then a
 * window of `seconds` in which only runs that complete inside it count, with the
 * round trips and the CPU time of that window (`cpu()`: ms used so far, by name,
 * read at the window's start and end); in-flight runs then finish uncounted.
 */
export async function throughput(loop: Loop, opts: { warmSeconds: number; seconds: number; parallel: number; cpu: () => Record<string, number> }) {
  const { warmSeconds, seconds, parallel, cpu } = opts;
  let from = Infinity;
  let until = Infinity;
  let runs = 0;
  let completed = 0;
  let warm = false;
  const samples: Samples = [];
  let cpuFrom: Record<string, number> | null = null;
  let cpuUntil: Record<string, number> | null = null;
  let end: NodeJS.Timeout | undefined;
  const open = () => {
    if (from !== Infinity || !warm || completed < parallel) return;
    from = performance.now();
    until = from + seconds * 1000;
    cpuFrom = cpu();
    end = setTimeout(() => (cpuUntil = cpu()), seconds * 1000);
  };
  const window = setTimeout(() => ((warm = true), open()), warmSeconds * 1000);
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (performance.now() < until) {
        const mine: Samples = [];
        const inWarmUp = performance.now() < from;
        try {
          await loop(mine);
        } catch (err) {
          if (inWarmUp) continue;
          throw err;
        }
        const now = performance.now();
        completed++;
        open();
        if (now >= from && now <= until) {
          runs++;
          samples.push(...mine);
        }
      }
    }),
  ).finally(() => (clearTimeout(window), clearTimeout(end)));
  const a = cpuFrom ?? cpu();
  const b = cpuUntil ?? cpu();
  const cpuPerRun = Object.fromEntries(Object.entries(b).map(([k, v]) => [k, (v - a[k]) / runs]));
  // completed: every run the loops finished, warm-up and the window's last ones included (nothing is in flight after them).
  return { perSecond: runs / seconds, runs, completed, samples, cpuPerRun };
}
