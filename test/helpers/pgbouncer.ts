import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { freePort } from "./balancer.js";

/**
 * A real PgBouncer (the Debian package) of one suite's (or bench's) own, in
 * transaction mode, in front of the Postgres at `upstream` (an admin URL), on a
 * free port in a temporary folder. It runs as the `postgres` user (PgBouncer
 * refuses root), so it needs root to start.
 */
const BINARY = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"].find((p) => fs.existsSync(p));
export const pgbouncerAvailable = BINARY !== undefined && process.getuid?.() === 0;

export interface PgBouncer {
  /** `url` with its host and port replaced by the pooler's. */
  through(url: string): string;
  /** The pooler's own numbers (`SHOW POOLS` on its admin console), summed over its pools. */
  pools(): Promise<{ serverConnections: number; clientsActive: number; clientsWaiting: number }>;
  stop(): Promise<void>;
}

export async function startPgBouncer(opts: { poolSize: number; upstream: string }): Promise<PgBouncer> {
  if (!pgbouncerAvailable) throw new Error("PgBouncer is not installed (apt-get install -y pgbouncer) or this is not root");
  const upstream = new URL(opts.upstream);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-pgbouncer-"));
  fs.chmodSync(dir, 0o755);
  const port = await freePort();
  fs.writeFileSync(path.join(dir, "users.txt"), `"${upstream.username || "postgres"}" ""\n`);
  fs.writeFileSync(
    path.join(dir, "pgbouncer.ini"),
    [
      "[databases]",
      `* = host=${upstream.hostname} port=${upstream.port || 5432}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = trust",
      `auth_file = ${path.join(dir, "users.txt")}`,
      `admin_users = ${upstream.username || "postgres"}`,
      "pool_mode = transaction",
      `default_pool_size = ${opts.poolSize}`,
      "max_client_conn = 2000",
      "ignore_startup_parameters = extra_float_digits,options",
      `logfile = ${path.join(dir, "pgbouncer.log")}`,
      `pidfile = ${path.join(dir, "pgbouncer.pid")}`,
      "",
    ].join("\n"),
  );
  execFileSync("chown", ["-R", "postgres:postgres", dir]);
  const child: ChildProcess = spawn("runuser", ["-u", "postgres", "--", BINARY!, path.join(dir, "pgbouncer.ini")], { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
  // Up once it takes a connection.
  const deadline = Date.now() + 10_000;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, "127.0.0.1", () => (s.destroy(), resolve(true)));
      s.once("error", () => resolve(false));
    });
    if (ok) break;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`PgBouncer did not start: ${output}${fs.existsSync(path.join(dir, "pgbouncer.log")) ? fs.readFileSync(path.join(dir, "pgbouncer.log"), "utf8") : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const through = (url: string) => {
    const u = new URL(url);
    u.hostname = "127.0.0.1";
    u.port = String(port);
    return u.toString();
  };
  return {
    through,
    pools: async () => {
      const pg = (await import("pg")).default;
      const u = new URL(through(opts.upstream));
      u.pathname = "/pgbouncer";
      // The admin console speaks the simple query protocol only.
      const c = new pg.Client({ connectionString: u.toString() });
      await c.connect();
      try {
        const { rows } = await c.query<Record<string, string>>("SHOW POOLS");
        const sum = (k: string) => rows.filter((r) => r.database !== "pgbouncer").reduce((a, r) => a + Number(r[k] ?? 0), 0);
        return { serverConnections: sum("sv_active") + sum("sv_idle") + sum("sv_used") + sum("sv_tested") + sum("sv_login"), clientsActive: sum("cl_active"), clientsWaiting: sum("cl_waiting") };
      } finally {
        await c.end();
      }
    },
    stop: async () => {
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        await new Promise((r) => child.once("exit", r));
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
