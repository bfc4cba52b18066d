// @ts-check
/**
 * Runs inside the sandbox's own network namespace (bubblewrap `--unshare-net`,
 * where only an empty loopback exists), before the agent CLI:
 *
 *   node forwarder.mjs <port>=<unix socket> ... -- <command> <args...>
 *
 * listens on 127.0.0.1:<port> (and ::1 where it exists) for each pair, pipes
 * every connection through the Unix socket to the worker (which alone decides
 * where it may go: network.ts), then starts the CLI with the same stdio and
 * exits as it exits. A loopback model API keeps its URL (same port inside);
 * the proxy port serves HTTPS_PROXY.
 *
 * Plain JavaScript on purpose: it runs on bare `node` inside the sandbox, where
 * neither tsx nor the worker's sources are mounted (the build copies it to dist).
 */
import { spawn } from "node:child_process";
import net from "node:net";
import os from "node:os";

const split = process.argv.indexOf("--");
if (split < 0 || split === process.argv.length - 1) {
  process.stderr.write("usage: forwarder.mjs <port>=<socket> ... -- <command> [args...]\n");
  process.exit(2);
}
const routes = process.argv.slice(2, split).map((spec) => {
  const at = spec.indexOf("=");
  return { port: Number(spec.slice(0, at)), socket: spec.slice(at + 1) };
});
const [command, ...args] = process.argv.slice(split + 1);

/** @param {net.Socket} a @param {net.Socket} b */
function splice(a, b) {
  a.pipe(b);
  b.pipe(a);
  for (const [x, y] of [[a, b], [b, a]]) {
    x.on("error", () => y.destroy());
    x.on("close", () => y.destroy());
  }
}

/** @param {number} port @param {string} socket @param {string} host */
function serve(port, socket, host) {
  return new Promise((resolve, reject) => {
    const server = net.createServer((inside) => splice(inside, net.connect(socket)));
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}

for (const { port, socket } of routes) {
  await serve(port, socket, "127.0.0.1");
  // ::1 only where the namespace has IPv6 (a "localhost" URL may resolve to it first).
  await serve(port, socket, "::1").catch(() => {});
}

const child = spawn(command, args, { stdio: "inherit" });
for (const signal of /** @type {const} */ (["SIGTERM", "SIGINT", "SIGHUP"])) process.on(signal, () => child.kill(signal));
child.on("error", (err) => {
  process.stderr.write(`${command}: ${err.message}\n`);
  process.exit(127);
});
child.on("exit", (code, signal) => process.exit(code ?? 128 + (signal ? os.constants.signals[signal] : 0)));
