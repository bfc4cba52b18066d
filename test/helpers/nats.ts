import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import { freePort } from "./balancer.js";
import { tempDir } from "./process.js";

/** The machine's NATS server (Debian's `nats-server`, JetStream built in). */
export const NATS_SERVER = "/usr/sbin/nats-server";
export const natsAvailable = fs.existsSync(NATS_SERVER);

/**
 * A NATS server of a test's own, with JetStream storing in a temporary folder:
 * stopped and started again on the same port and store (an outage the
 * service must ride through), with its monitoring endpoint for message counts.
 */
export interface Nats {
  url: string;
  /** The monitoring endpoint's base (`/varz`: in_msgs, out_msgs). */
  monitorUrl: string;
  /** Stops the server (SIGTERM, or SIGKILL with `kill`); its store stays. */
  stop(kill?: boolean): Promise<void>;
  /** Starts it again on the same port and store. */
  start(): Promise<void>;
  /** Messages the server received and delivered so far. */
  varz(): Promise<{ in_msgs: number; out_msgs: number; connections: number }>;
}

export async function startNats(): Promise<Nats> {
  if (!natsAvailable) throw new Error(`${NATS_SERVER} is not installed: apt-get install nats-server (the run bus's suites need it; .ci/run installs it)`);
  const [port, monitor] = [await freePort(), await freePort()];
  const store = tempDir("svc-nats-");
  let child: ChildProcess | null = null;
  const start = async () => {
    const c = spawn(NATS_SERVER, ["-a", "127.0.0.1", "-p", String(port), "-m", String(monitor), "-js", "-sd", store], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    c.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
    child = c;
    const deadline = Date.now() + 10_000;
    while (!(await listening(port))) {
      if (c.exitCode !== null || Date.now() > deadline) throw new Error(`nats-server did not start on ${port}: ${err}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    monitorUrl: `http://127.0.0.1:${monitor}`,
    start,
    async stop(kill = false) {
      const c = child;
      if (!c || c.exitCode !== null) return;
      const exited = new Promise((r) => c.once("exit", r));
      c.kill(kill ? "SIGKILL" : "SIGTERM");
      await exited;
      child = null;
    },
    async varz() {
      const res = await fetch(`http://127.0.0.1:${monitor}/varz`);
      return (await res.json()) as { in_msgs: number; out_msgs: number; connections: number };
    },
  };
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}
