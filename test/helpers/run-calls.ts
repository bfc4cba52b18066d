import { pollUntil } from "./process.js";

/** A run as `GET /v1/runs/:id` answers it (the fields tests read). */
export interface RunView {
  status: string;
  stopReason: string | null;
  error: { code: string; message: string } | null;
  output: string | null;
}

/** A run start over raw HTTP: its status, `Service-Run-Id`, `Retry-After` and, when refused, the envelope's error. */
export interface RunStart {
  status: number;
  runId: string | null;
  retryAfter: string | null;
  error?: { code: string; message: string };
}

/**
 * The app's raw HTTP calls on runs against one server, with its app key: start a
 * run (its stream dropped once the headers came: a dropped stream never cancels
 * a run), read it, wait for it to end.
 */
export function runCalls(server: { fetch(path: string, init?: RequestInit): Promise<Response>; dev: { appKey: string } }) {
  const headers = () => ({ authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" });
  const getRun = async (runId: string) => (await (await server.fetch(`/v1/runs/${runId}`, { headers: headers() })).json()) as RunView;
  return {
    headers,
    getRun,
    ended: (runId: string, timeoutMs = 20_000) => pollUntil(() => getRun(runId), (r) => ["completed", "failed", "cancelled"].includes(r.status), timeoutMs, `run ${runId} to end`),
    async startRun(body: Record<string, unknown>): Promise<RunStart> {
      const ac = new AbortController();
      const res = await server.fetch("/v1/runs", { method: "POST", headers: headers(), body: JSON.stringify(body), signal: ac.signal });
      const runId = res.headers.get("service-run-id");
      const retryAfter = res.headers.get("retry-after");
      if (res.status !== 200) return { status: res.status, runId, retryAfter, error: ((await res.json()) as { error: { code: string; message: string } }).error };
      ac.abort();
      return { status: 200, runId, retryAfter };
    },
  };
}
