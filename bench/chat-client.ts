/**
 * The HTTP client side of bench/chat.ts: plain `node:http` with keep-alive agents
 * (lighter than fetch, so less of the client's own cost is in the numbers), the
 * same code for every target. A request, and a streamed chat completion read
 * frame by frame with the time of each content chunk.
 */
import http from "node:http";
import { performance } from "node:perf_hooks";

export interface Answer {
  status: number;
  text: string;
}

/** POSTs `body` and reads the whole answer. */
export function post(agent: http.Agent, url: string, headers: Record<string, string>, body: string, timeoutMs = 30_000): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", agent, headers: { ...headers, "content-length": String(Buffer.byteLength(body)) }, timeout: timeoutMs }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}

export interface StreamResult {
  status: number;
  /** ms from the request being sent to the first non-empty `delta.content` in hand. */
  ttft: number;
  /** ms from the request being sent to `data: [DONE]` (or the end). */
  total: number;
  /** Content chunks received. */
  chunks: number;
  /** Characters of content received, all chunks together. */
  chars: number;
  /** Largest gap between two consecutive content chunks, ms. */
  maxGap: number;
  /** `data: [DONE]` seen. */
  done: boolean;
  /** A usage chunk seen. */
  usage: boolean;
  error?: string;
}

/**
 * POSTs a streamed chat completion (or response) and reads its `text/event-stream`
 * frames as they come. The time of a chunk is when the bytes holding it were read.
 */
export function stream(agent: http.Agent, url: string, headers: Record<string, string>, body: string, timeoutMs = 60_000): Promise<StreamResult> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const r: StreamResult = { status: 0, ttft: NaN, total: NaN, chunks: 0, chars: 0, maxGap: 0, done: false, usage: false };
    let last = 0;
    let settled = false;
    const finish = (error?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      r.total = performance.now() - t0;
      if (error) r.error = error;
      resolve(r);
    };
    const req = http.request(url, { method: "POST", agent, headers: { ...headers, "content-length": String(Buffer.byteLength(body)) } }, (res) => {
      r.status = res.statusCode ?? 0;
      let buf = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        const now = performance.now();
        buf += c;
        let at: number;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, at);
          buf = buf.slice(at + 2);
          for (const line of frame.split("\n")) {
            if (!line.startsWith("data: ")) continue;
            const data = line.slice(6);
            if (data === "[DONE]") {
              r.done = true;
              continue;
            }
            let chunk: { choices?: { delta?: { content?: string } }[]; usage?: unknown; error?: { message?: string }; type?: string; delta?: string; response?: { usage?: unknown } };
            try {
              chunk = JSON.parse(data);
            } catch {
              r.error = `not JSON: ${data.slice(0, 100)}`;
              continue;
            }
            if (chunk.error) r.error = chunk.error.message ?? "error frame";
            // A chat completion's chunk, or a response's event (`POST /v1/responses`): its text delta, its usage at `response.completed`.
            if (chunk.usage || (chunk.type === "response.completed" && chunk.response?.usage)) r.usage = true;
            const content = chunk.choices?.[0]?.delta?.content ?? (chunk.type === "response.output_text.delta" ? chunk.delta : undefined);
            if (content) {
              if (r.chunks === 0) r.ttft = now - t0;
              else r.maxGap = Math.max(r.maxGap, now - last);
              last = now;
              r.chunks++;
              r.chars += content.length;
            }
          }
        }
      });
      res.on("end", () => finish(r.status === 200 ? undefined : `HTTP ${r.status}: ${buf.slice(0, 200)}`));
      res.on("error", (err) => finish(err.message));
    });
    const timer = setTimeout(() => (req.destroy(), finish(`not finished in ${timeoutMs} ms`)), timeoutMs);
    req.on("error", (err) => finish(err.message));
    req.end(body);
  });
}
