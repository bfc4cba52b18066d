import net from "node:net";
import type { AddressInfo } from "node:net";

/**
 * A tiny TCP load balancer for tests with several server instances: each new
 * connection goes to the first backend of `backends` that accepts it (the next
 * is tried on a connection error, a dead instance's closed port). It is plain
 * TCP, so HTTP, SSE and WebSocket upgrades pass through untouched, and a
 * backend's death closes the connections it carried: a worker connected through
 * it reconnects, and lands on the next live backend. `backends` may be changed
 * at any time; it applies to new connections.
 */
export interface Balancer {
  /** `http://127.0.0.1:<port>`: what clients (and the instances' PUBLIC_URL) use. */
  url: string;
  port: number;
  backends: { host: string; port: number }[];
  /** How many connections went to each backend port, for assertions. */
  readonly forwarded: Map<number, number>;
  /** `fetch` through the balancer, path relative to its URL (pairViaApi takes it). */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

export async function startBalancer(backends: { host: string; port: number }[] = []): Promise<Balancer> {
  const sockets = new Set<net.Socket>();
  const forwarded = new Map<number, number>();
  const track = (s: net.Socket) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  };

  const server = net.createServer((client) => {
    track(client);
    client.pause();
    client.on("error", () => {});
    const candidates = [...balancer.backends];
    const attempt = (i: number) => {
      if (client.destroyed) return;
      if (i >= candidates.length) return void client.destroy();
      const { host, port } = candidates[i];
      const upstream = net.connect({ host, port });
      track(upstream);
      let connected = false;
      upstream.once("connect", () => {
        connected = true;
        forwarded.set(port, (forwarded.get(port) ?? 0) + 1);
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
      upstream.on("error", () => {
        if (!connected) attempt(i + 1);
      });
      upstream.once("close", () => {
        if (connected) client.destroy();
      });
      client.once("close", () => upstream.destroy());
    };
    attempt(0);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const url = `http://127.0.0.1:${port}`;
  const balancer: Balancer = {
    url,
    port,
    backends,
    forwarded,
    fetch: (p, init) => fetch(`${url}${p}`, init),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  return balancer;
}

/** A TCP port free right now on 127.0.0.1 (to start an instance on a port known in advance). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
