import fs from "node:fs";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import type { Launched } from "../runtimes/runtime.js";
import type { Confinement } from "./confinement.js";
import { closeAll, listen, modelApiProxy, proxyEnv } from "./network.js";

/**
 * The macOS sandbox: a Seatbelt profile run with `sandbox-exec -p`.
 *
 * Seatbelt filters what a process does rather than what it sees, so the
 * profile starts from `allow default` (a CLI needs many Mach services and
 * sysctls no short profile would list) and takes away what matters here:
 * - reading the contents of the users' folders (HOME, /Users), other volumes
 *   and the shared and per-user temporary folders, except the listed paths.
 *   Names stay visible to `stat` (path lookups must work), contents do not;
 * - writing anywhere but the working folder, the writable paths, a private
 *   temporary folder (TMPDIR) and the terminal devices;
 * - with the network off: every connection except to the loopback ports of the
 *   model APIs (Seatbelt can filter remote addresses only as `localhost` or `*`,
 *   so a remote API goes through the worker's proxy on loopback, which lets
 *   through only its hosts) and the Unix sockets of the writable folders (the
 *   MCP bridge).
 */
export interface SeatbeltRules {
  cwd: string;
  readable: string[];
  writable: string[];
  /** Folders whose contents are hidden (except what is readable or writable). */
  hidden: string[];
  /** Loopback ports the CLI may connect to, or `null` for the whole network. */
  ports: number[] | null;
}

const quote = (p: string) => `"${p.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
const subpaths = (paths: string[]) => paths.map((p) => `(subpath ${quote(p)})`).join(" ");

export function seatbeltProfile(r: SeatbeltRules): string {
  const writable = [r.cwd, ...r.writable];
  const lines = [
    "(version 1)",
    "(allow default)",
    `(deny file-read-data file-read-xattr ${subpaths(r.hidden)})`,
    `(allow file-read-data file-read-xattr ${subpaths([...writable, ...r.readable])})`,
    "(deny file-write*)",
    `(allow file-write* ${subpaths(writable)} (literal "/dev/null") (literal "/dev/tty") (subpath "/dev/fd"))`,
  ];
  if (r.ports) {
    lines.push("(deny network*)");
    const remotes = [...r.ports.map((port) => `(remote ip "localhost:${port}")`), `(remote unix-socket ${subpaths(writable)})`];
    lines.push(`(allow network-outbound ${remotes.join(" ")})`);
  }
  return lines.join("\n") + "\n";
}

/** Seatbelt matches real paths (`/tmp` is `/private/tmp` there): resolve what exists. */
const real = (p: string) => {
  try {
    return fs.realpathSync(p);
  } catch {
    return p;
  }
};

/** Starts a CLI under `sandbox-exec`, with a private TMPDIR and, for remote model APIs with the network off, the worker's proxy. */
export async function launchInSeatbelt(sandboxExec: string, c: Confinement, args: string[], env: NodeJS.ProcessEnv): Promise<Launched> {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "svc-agent-"));
  const servers: net.Server[] = [];
  const cleanup = async () => {
    await closeAll(servers);
    fs.rmSync(tmp, { recursive: true, force: true });
  };
  const launchedEnv: NodeJS.ProcessEnv = { ...env, TMPDIR: tmp };
  let ports: number[] | null = null;
  try {
    if (!c.network) {
      ports = [...new Set(c.apis.filter((a) => a.loopback).map((a) => a.port))];
      const remote = c.apis.filter((a) => !a.loopback);
      if (remote.length > 0) {
        const proxy = await listen(modelApiProxy(remote), 0);
        servers.push(proxy);
        const port = (proxy.address() as net.AddressInfo).port;
        ports.push(port);
        Object.assign(launchedEnv, proxyEnv(port));
      }
    }
  } catch (err) {
    await cleanup();
    throw err;
  }
  const profile = seatbeltProfile({
    cwd: real(c.cwd),
    readable: c.readable.map(real),
    writable: [...c.writable, tmp].map(real),
    hidden: [...new Set(["/Users", "/Volumes", "/private/tmp", "/private/var/folders", real(c.home)])],
    ports,
  });
  return { command: sandboxExec, args: ["-p", profile, c.command, ...c.prefix, ...args], cwd: c.cwd, env: launchedEnv, cleanup };
}
