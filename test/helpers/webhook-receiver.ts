import http from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";

/** One request a receiver got, as it got it. */
export interface Received {
  path: string;
  headers: Record<string, string>;
  /** The raw body (what the signature covers). */
  body: string;
  at: number;
}

/** What the receiver answers its n-th request (from 1): a status, `hang` (never answers), or a promise of either. */
export type Answer = (n: number, r: Received) => number | "hang" | Promise<number | "hang">;

export interface Receiver {
  url: string;
  received: Received[];
  /** Waits until at least `n` requests came. */
  waitFor(n: number, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
}

/** A real HTTP server standing in for the app's webhook endpoint (answers 200 unless told otherwise). */
export async function startReceiver(answer: Answer = () => 200): Promise<Receiver> {
  const received: Received[] = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : String(v)]));
    const r: Received = { path: req.url ?? "/", headers, body: Buffer.concat(chunks).toString("utf8"), at: Date.now() };
    received.push(r);
    const status = await answer(received.length, r);
    if (status === "hang") return;
    res.writeHead(status, status >= 300 && status < 400 ? { location: "/landed" } : { "content-type": "text/plain" });
    res.end(status < 300 ? "ok" : "no");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    async waitFor(n, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (received.length < n) {
        if (Date.now() > deadline) throw new Error(`the receiver got ${received.length} requests, not ${n}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      return received;
    },
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

/** The payload, verified with the endpoint's secret as an app would (throws when the signature does not verify). */
export function verified(secret: string, r: Received): { type: string; timestamp: string; data: Record<string, unknown> } {
  return new Webhook(secret).verify(r.body, r.headers) as { type: string; timestamp: string; data: Record<string, unknown> };
}
