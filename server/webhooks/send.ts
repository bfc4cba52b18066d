import http from "node:http";
import https from "node:https";
import { guardedAgents, openAgents, publicOnlyLookup, refuseLiteral } from "./address-guard.js";

/** How one attempt went: the receiver's status, or why there was none. */
export interface AttemptResult {
  statusCode: number | null;
  error: string | null;
  durationMs: number;
}

/** Bytes of a receiver's answer read before the connection is dropped (the body is not used). */
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * POSTs `body` once, within `timeoutMs` for the whole exchange. Redirects are
 * never followed (a 3xx is a failed attempt, saying so, but never where it pointed:
 * the delivery log must not show where a target redirected); a 2xx is the only
 * success. Never throws: a timeout, a refused connection or a reset is an error
 * string. `signal` aborts it (the service stopping). With `publicOnly`, the URL's
 * literal address and every DNS answer must be public (address-guard.ts), and the
 * connection comes from agents whose every socket was checked so.
 */
export function postOnce(url: string, headers: Record<string, string>, body: string, timeoutMs: number, signal?: AbortSignal, publicOnly = false): Promise<AttemptResult> {
  const started = performance.now();
  const took = () => Math.round(performance.now() - started);
  return new Promise((resolve) => {
    let done = false;
    const finish = (statusCode: number | null, error: string | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve({ statusCode, error, durationMs: took() });
    };
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      return resolve({ statusCode: null, error: "invalid URL", durationMs: 0 });
    }
    const client = target.protocol === "https:" ? https : target.protocol === "http:" ? http : null;
    if (!client) return resolve({ statusCode: null, error: `unsupported protocol ${target.protocol}`, durationMs: 0 });

    if (publicOnly) {
      const refused = refuseLiteral(target.hostname);
      if (refused) return resolve({ statusCode: null, error: refused, durationMs: 0 });
    }

    const payload = Buffer.from(body, "utf8");
    const agents = publicOnly ? guardedAgents : openAgents;
    const req = client.request(target, {
      method: "POST",
      headers: { ...headers, "content-length": String(payload.length) },
      agent: client === https ? agents.https : agents.http,
      ...(publicOnly ? { lookup: publicOnlyLookup } : {}),
    });
    const timer = setTimeout(() => {
      finish(null, `timed out after ${timeoutMs} ms`);
      req.destroy();
    }, timeoutMs);
    const onAbort = () => {
      finish(null, "interrupted: the service stopped during the attempt");
      req.destroy();
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });

    req.on("error", (err: NodeJS.ErrnoException) => finish(null, err.code ? `${err.code}: ${err.message}` : err.message || "connection failed"));
    req.on("response", (res) => {
      const status = res.statusCode ?? 0;
      const error =
        status >= 200 && status < 300
          ? null
          : status >= 300 && status < 400
            ? `HTTP ${status}: redirects are not followed`
            : `HTTP ${status}`;
      // The answer's body is read (so the connection can be reused) but not kept; a huge one is cut off.
      let read = 0;
      res.on("data", (chunk: Buffer) => {
        read += chunk.length;
        if (read > MAX_ANSWER_BYTES) {
          finish(status, error);
          res.destroy();
        }
      });
      res.on("end", () => finish(status, error));
      res.on("error", () => finish(status, error));
      res.on("close", () => finish(status, error));
    });
    req.end(payload);
  });
}
