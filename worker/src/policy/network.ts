import http from "node:http";
import net from "node:net";

/**
 * The worker's side of a sandboxed CLI's network when the user's policy keeps
 * the network off: the CLI may still reach its model API, and nothing else.
 * The decision is made here, in the worker, never inside the sandbox: whatever
 * runs in the sandbox only ever reaches these servers, and they connect only
 * to the model APIs the runtime named.
 */

/** One model API base URL, as the network rules see it. */
export interface ModelApi {
  host: string;
  port: number;
  /** On this machine's loopback: reached on the same port inside the sandbox, so its URL works unchanged. */
  loopback: boolean;
}

const LOOPBACK_NAMES = new Set(["localhost", "127.0.0.1", "::1", "[::1]"]);

export function parseModelApi(baseUrl: string): ModelApi {
  const url = new URL(baseUrl);
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error(`A model API must be http or https: ${baseUrl}`);
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  const port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
  return { host, port, loopback: LOOPBACK_NAMES.has(host) || /^127\./.test(host) };
}

/** Environment that sends a CLI's http and https requests to the proxy (both spellings: curl reads only the lower-case ones). */
export function proxyEnv(port: number): Record<string, string> {
  const proxy = `http://127.0.0.1:${port}`;
  const noProxy = "localhost,127.0.0.1,::1";
  return { HTTPS_PROXY: proxy, https_proxy: proxy, HTTP_PROXY: proxy, http_proxy: proxy, NO_PROXY: noProxy, no_proxy: noProxy };
}

const key = (host: string, port: number) => `${host.replace(/^\[(.*)\]$/, "$1").toLowerCase()}:${port}`;

/** Pipes two sockets together; either side ending or failing ends both. */
function splice(a: net.Socket, b: net.Socket): void {
  a.pipe(b).on("error", () => a.destroy());
  b.pipe(a).on("error", () => b.destroy());
  a.on("error", () => b.destroy());
  b.on("error", () => a.destroy());
  a.on("close", () => b.destroy());
  b.on("close", () => a.destroy());
}

/** A server whose every connection is piped to one fixed host and port (a loopback model API). */
export function pipeServer(host: string, port: number): net.Server {
  return net.createServer((inside) => {
    inside.pause();
    const outside = net.connect(port, host, () => inside.resume());
    splice(inside, outside);
  });
}

/**
 * An HTTP proxy that lets through only the model APIs: `CONNECT host:port`
 * (how clients reach an https URL through HTTPS_PROXY: Claude Code, Codex's
 * reqwest, curl) and absolute-form requests to a plain-http API (HTTP_PROXY).
 * Everything else gets 403, so the CLI's commands reach nothing else either.
 */
export function modelApiProxy(apis: ModelApi[]): http.Server {
  const allowed = new Set(apis.map((a) => key(a.host, a.port)));
  const server = http.createServer((req, res) => {
    let target: URL;
    try {
      target = new URL(req.url ?? "");
    } catch {
      res.writeHead(400).end("Absolute-form URL expected: this is a proxy.\n");
      return;
    }
    const port = target.port ? Number(target.port) : 80;
    if (target.protocol !== "http:" || !allowed.has(key(target.hostname, port))) {
      res.writeHead(403).end("The policy of the user's machine keeps the network off for this CLI, except for its model API.\n");
      return;
    }
    const headers = { ...req.headers };
    delete headers["proxy-connection"];
    delete headers["proxy-authorization"];
    const upstream = http.request({ host: target.hostname, port, method: req.method, path: target.pathname + target.search, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => (res.headersSent ? res.destroy() : res.writeHead(502).end()));
    req.pipe(upstream);
  });
  server.on("connect", (req: http.IncomingMessage, inside: net.Socket, head: Buffer) => {
    const target = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(req.url ?? "");
    if (!target || !allowed.has(key(target[1], Number(target[2])))) {
      inside.end("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    const outside = net.connect(Number(target[2]), target[1].replace(/^\[(.*)\]$/, "$1"), () => {
      inside.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length) outside.write(head);
      splice(inside, outside);
    });
    outside.on("error", () => inside.end("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"));
  });
  return server;
}

const connections = new WeakMap<net.Server, Set<net.Socket>>();

/** Starts a server listening on a Unix socket path or a loopback TCP port; resolves once it listens. */
export function listen(server: net.Server, where: string | number): Promise<net.Server> {
  const open = new Set<net.Socket>();
  connections.set(server, open);
  server.on("connection", (s: net.Socket) => (open.add(s), s.on("close", () => open.delete(s))));
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    const done = () => (server.off("error", reject), resolve(server));
    if (typeof where === "string") server.listen(where, done);
    else server.listen(where, "127.0.0.1", done);
  });
}

/** Closes servers and every connection still open through them. */
export async function closeAll(servers: net.Server[]): Promise<void> {
  await Promise.all(
    servers.map(
      (s) =>
        new Promise<void>((resolve) => {
          s.close(() => resolve());
          for (const socket of connections.get(s) ?? []) socket.destroy();
        }),
    ),
  );
}
