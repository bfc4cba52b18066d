import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { postgresAvailable } from "./databases.js";
import { freePort } from "./balancer.js";

/**
 * A Postgres cluster of one suite's own, on a free port in a temporary folder, so
 * the suite may stop it (`pg_ctl stop -m immediate`) without touching the shared
 * one every other suite uses. Needs the Postgres binaries and root (initdb runs as
 * the `postgres` user through `runuser`).
 */
const PG_BIN = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"].find((d) => fs.existsSync(path.join(d, "pg_ctl")));
export const privatePostgresAvailable = postgresAvailable && PG_BIN !== undefined && process.getuid?.() === 0;

export interface PrivatePostgres {
  url: string;
  port: number;
  /** Starts it again (after `stop`), waiting until it takes connections. */
  start(): void;
  /** `pg_ctl stop -m immediate`: every backend killed at once, as a crash or a failover does. */
  stop(): void;
  /** Stops it (if up) and removes its folder. */
  remove(): void;
}

function asPostgres(bin: string, args: string[]): string {
  return execFileSync("runuser", ["-u", "postgres", "--", path.join(PG_BIN!, bin), ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-outage-"));
  fs.chmodSync(dir, 0o755);
  execFileSync("chown", ["postgres:postgres", dir]);
  const port = await freePort();
  asPostgres("initdb", ["-D", path.join(dir, "data"), "-A", "trust", "-U", "postgres", "--no-sync"]);
  const pgctl = (...args: string[]) => asPostgres("pg_ctl", ["-D", path.join(dir, "data"), ...args]);
  let up = false;
  const cluster: PrivatePostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start() {
      pgctl("-l", path.join(dir, "postgres.log"), "-w", "-t", "60", "-o", `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, "start");
      up = true;
    },
    stop() {
      up = false;
      pgctl("-m", "immediate", "-w", "stop");
    },
    remove() {
      if (up) {
        try {
          cluster.stop();
        } catch {
          /* already stopped */
        }
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  cluster.start();
  return cluster;
}
