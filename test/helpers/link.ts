import net from "node:net";
import type { AddressInfo } from "node:net";

/**
 * A TCP link for tests that can go silent: every byte between the two ends is
 * forwarded until `silence()`, then nothing moves in either direction and
 * nothing is closed (as when a network path dies: the peers hear nothing, no
 * FIN, no reset), until `restore()`, when what was held flows again, then any
 * close that happened meanwhile. Reading stops while silent, so the kernel's
 * buffers fill and the senders block, as on a real dead path. A connection
 * opened while silent is held too and reaches the target only on restore.
 */
export interface Link {
  /** `http://127.0.0.1:<port>`: what the worker is told to use (the server's PUBLIC_URL). */
  url: string;
  /** Where connections go; set it before the first one. */
  target: { host: string; port: number } | null;
  readonly silenced: boolean;
  /** Connections opened through the link so far. */
  readonly opened: number;
  silence(): void;
  restore(): void;
  close(): Promise<void>;
}

interface Pair {
  client: net.Socket;
  upstream: net.Socket | null;
  /** Connected to the target (bytes may flow once the link is up). */
  connected: boolean;
  flowing: boolean;
}

export async function startLink(): Promise<Link> {
  const pairs = new Set<Pair>();
  let silenced = false;
  let opened = 0;
  /** What waits for the link to come back: connecting a held client, a close seen while silent. */
  let held: (() => void)[] = [];
  const whenUp = (fn: () => void) => (silenced ? held.push(fn) : fn());

  const flow = (p: Pair) => {
    if (!p.upstream || !p.connected || p.flowing) return;
    p.flowing = true;
    p.client.pipe(p.upstream);
    p.upstream.pipe(p.client);
  };
  const stop = (p: Pair) => {
    p.flowing = false;
    p.client.unpipe();
    p.client.pause();
    if (p.upstream) {
      p.upstream.unpipe();
      p.upstream.pause();
    }
  };
  const forget = (p: Pair) => {
    if (p.client.destroyed && (!p.upstream || p.upstream.destroyed)) pairs.delete(p);
  };

  const connect = (p: Pair) => {
    if (p.client.destroyed || !link.target) return void p.client.destroy();
    const upstream = net.connect(link.target);
    p.upstream = upstream;
    upstream.on("error", () => {});
    upstream.once("connect", () => {
      p.connected = true;
      whenUp(() => flow(p));
    });
    // A close is news that travels on the path: it arrives only while the link is up, after the bytes before it.
    upstream.once("close", () => {
      forget(p);
      whenUp(() => p.client.end());
    });
    p.client.once("close", () => whenUp(() => upstream.end()));
  };

  const server = net.createServer((client) => {
    opened++;
    client.pause();
    client.on("error", () => {});
    const p: Pair = { client, upstream: null, connected: false, flowing: false };
    pairs.add(p);
    client.once("close", () => forget(p));
    whenUp(() => connect(p));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const link: Link = {
    url,
    target: null,
    get silenced() {
      return silenced;
    },
    get opened() {
      return opened;
    },
    silence() {
      if (silenced) return;
      silenced = true;
      for (const p of pairs) stop(p);
    },
    restore() {
      if (!silenced) return;
      silenced = false;
      for (const p of pairs) flow(p);
      const waiting = held;
      held = [];
      for (const fn of waiting) fn();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const p of pairs) {
          p.client.destroy();
          p.upstream?.destroy();
        }
        server.close(() => resolve());
      }),
  };
  return link;
}
