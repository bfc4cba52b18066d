import net from "node:net";
import { freePort } from "./balancer.js";
import type { AddressInfo } from "node:net";

/**
 * A TCP link for tests that can go silent: every byte between the two ends is
 * forwarded until `silence()`, then nothing moves in either direction and
 * nothing is closed (as when a network path dies: the peers hear nothing, no
 * FIN, no reset), until `restore()`, when what was held flows again, then any
 * close that happened meanwhile. Reading stops while silent, so the kernel's
 * buffers fill and the senders block, as on a real dead path.
 *
 * New connections opened while silent are held too (they reach the target only
 * on restore), unless `silence({ newConnections: "pass" })`: then only the paths
 * of the connections open at that moment are dead, as when a laptop changes
 * networks, and a new connection goes through.
 */
export interface Link {
  /** `http://127.0.0.1:<port>`: what the worker is told to use (the server's PUBLIC_URL). */
  url: string;
  /** Where connections go; set it before the first one. */
  target: { host: string; port: number } | null;
  /** Connections opened through the link so far. */
  readonly opened: number;
  silence(opts?: { newConnections?: "hold" | "pass" }): void;
  restore(): void;
  close(): Promise<void>;
}

/** One connection through the link: the client's socket, the one to the target, and whether its path is dead now. */
class Path {
  upstream: net.Socket | null = null;
  private connected = false;
  private flowing = false;
  private dead = false;
  /** What happened on a dead path, delivered when it is back: a close seen meanwhile. */
  private held: (() => void)[] = [];

  constructor(readonly client: net.Socket) {
    client.pause();
    client.on("error", () => {});
  }

  connect(target: { host: string; port: number }): void {
    if (this.client.destroyed) return;
    const upstream = net.connect(target);
    this.upstream = upstream;
    upstream.on("error", () => {});
    upstream.once("connect", () => {
      this.connected = true;
      this.flow();
    });
    // A close is news that travels on the path: it arrives only while the path is up, after the bytes before it.
    upstream.once("close", () => this.whenUp(() => this.client.end()));
    this.client.once("close", () => this.whenUp(() => upstream.end()));
  }

  kill(): void {
    this.dead = true;
    this.flowing = false;
    this.client.unpipe();
    this.client.pause();
    this.upstream?.unpipe();
    this.upstream?.pause();
  }

  revive(): void {
    this.dead = false;
    this.flow();
    const held = this.held;
    this.held = [];
    for (const fn of held) fn();
  }

  destroy(): void {
    this.client.destroy();
    this.upstream?.destroy();
  }

  get gone(): boolean {
    return this.client.destroyed && (!this.upstream || this.upstream.destroyed);
  }

  private flow(): void {
    if (this.dead || !this.upstream || !this.connected || this.flowing) return;
    this.flowing = true;
    this.client.pipe(this.upstream);
    this.upstream.pipe(this.client);
  }

  private whenUp(fn: () => void): void {
    if (this.dead) this.held.push(fn);
    else fn();
  }
}

export async function startLink(): Promise<Link> {
  const paths = new Set<Path>();
  let holding = false;
  let opened = 0;
  /** Connections opened while new ones are held: they go through on restore. */
  let waiting: Path[] = [];

  const server = net.createServer((client) => {
    opened++;
    for (const p of paths) if (p.gone) paths.delete(p);
    const p = new Path(client);
    paths.add(p);
    if (holding) {
      p.kill();
      waiting.push(p);
    } else if (link.target) p.connect(link.target);
    else client.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));

  const link: Link = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    target: null,
    get opened() {
      return opened;
    },
    silence(opts = {}) {
      holding = (opts.newConnections ?? "hold") === "hold";
      for (const p of paths) p.kill();
    },
    restore() {
      holding = false;
      for (const p of paths) p.revive();
      const held = waiting;
      waiting = [];
      for (const p of held) if (link.target) p.connect(link.target);
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const p of paths) p.destroy();
        server.close(() => resolve());
      }),
  };
  return link;
}

/**
 * A server its workers reach only through a link the test can silence (its
 * `PUBLIC_URL`, which pairing hands to the worker), while the test and the app
 * talk to its port directly (`direct`, `api`). `start` gets the environment to
 * start the server with (its `PORT` and `PUBLIC_URL` added to `env`).
 */
export async function serverBehindLink<S>(
  start: (env: Record<string, string>) => Promise<S>,
  env: Record<string, string> = {},
): Promise<{ server: S; link: Link; direct: string; api: { url: string; fetch(path: string, init?: RequestInit): Promise<Response> } }> {
  const link = await startLink();
  const port = await freePort();
  const server = await start({ ...env, PORT: String(port), PUBLIC_URL: link.url }).catch(async (err: unknown) => {
    await link.close();
    throw err;
  });
  link.target = { host: "127.0.0.1", port };
  const direct = `http://127.0.0.1:${port}`;
  return { server, link, direct, api: { url: direct, fetch: (p, init) => fetch(`${direct}${p}`, init) } };
}
