import fs from "node:fs";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import type { Launched } from "../runtimes/runtime.js";
import type { Confinement } from "./confinement.js";
import { helperCommand } from "../layout.js";
import { closeAll, listen, modelApiProxy, pipeServer, proxyEnv } from "./network.js";

/**
 * The system, read-only. Everything else of the host is absent: bubblewrap
 * starts from an empty root, so HOME, /home, /root, /tmp, /var, /srv, /mnt and
 * other disks simply do not exist inside unless mounted below. /opt and
 * /nix/store hold installed software (Node, CLIs) on some systems.
 */
const SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix/store"];

/** Where the worker's egress sockets appear inside the sandbox. */
const INSIDE_NET = "/run/svc-net";

/** The in-sandbox forwarder: `forwarder.mjs` (copied into dist/ by the build), or the single file in its helper mode. */
const FORWARDER = helperCommand("forwarder");

/** A port for the inside end of the proxy, away from the loopback model APIs' own ports. */
const PROXY_PORTS = [3128, 8118, 18080, 28080];

type Mount = { kind: "symlink" | "tmpfs" | "proc" | "dev" | "ro" | "ro-try" | "rw" | "rw-try"; src: string; dest: string };

const ORDER: Record<Mount["kind"], number> = { symlink: 0, proc: 0, dev: 0, tmpfs: 0, ro: 1, "ro-try": 1, rw: 2, "rw-try": 2 };
const depth = (p: string) => p.split("/").filter(Boolean).length;

/** The folder /etc/resolv.conf really lives in, when that is outside the system folders mounted anyway. */
function resolvConfFolder(): string | undefined {
  try {
    const folder = path.dirname(fs.realpathSync("/etc/resolv.conf"));
    return SYSTEM.some((dir) => folder === dir || folder.startsWith(`${dir}/`)) ? undefined : folder;
  } catch {
    return undefined;
  }
}

/**
 * The bubblewrap arguments (before `--` and the command) for a confinement.
 *
 * Mounts are applied shallowest first, so the most specific path wins: the
 * working folder inside HOME is writable although HOME is an empty tmpfs, a
 * `node_modules` the user listed readable inside a writable folder stays
 * read-only, and at the same path writable beats readable.
 *
 * - `--die-with-parent`: a cancelled job (bwrap killed) or a dead worker takes
 *   the whole sandbox with it (with `--unshare-pid` the kernel kills every
 *   process in it when its init dies);
 * - `--new-session`: no TIOCSTI keystroke injection into the worker's terminal;
 * - `--cap-drop ALL`: a worker run as root would otherwise hand the CLI every
 *   capability (it could mount the host's disks or remount its read-only views);
 *   an unprivileged bubblewrap drops them anyway;
 * - pid, ipc, uts (and cgroup where possible) namespaces: the CLI cannot see or
 *   signal the user's other processes, nor their shared memory;
 * - `--unshare-net` unless the policy allows the network: only an empty
 *   loopback, where the forwarder offers the model APIs;
 * - a fresh /proc, a minimal /dev, an empty /tmp, an empty tmpfs at HOME with
 *   only the listed parts of HOME mounted back.
 */
export function bubblewrapArgs(c: Confinement, extra: Mount[] = []): string[] {
  const mounts: Mount[] = [{ kind: "proc", src: "", dest: "/proc" }, { kind: "dev", src: "", dest: "/dev" }, { kind: "tmpfs", src: "", dest: "/tmp" }];
  for (const dir of SYSTEM) {
    const stat = fs.lstatSync(dir, { throwIfNoEntry: false });
    if (stat?.isSymbolicLink()) mounts.push({ kind: "symlink", src: fs.readlinkSync(dir), dest: dir });
    else if (stat?.isDirectory()) mounts.push({ kind: "ro", src: dir, dest: dir });
  }
  // With the network shared, name resolution must work: /etc/resolv.conf often points into /run (systemd-resolved, resolvconf, NetworkManager).
  const resolv = c.network ? resolvConfFolder() : undefined;
  if (resolv) mounts.push({ kind: "ro", src: resolv, dest: resolv });
  mounts.push({ kind: "tmpfs", src: "", dest: c.home });
  for (const p of c.readable) mounts.push({ kind: "ro-try", src: p, dest: p });
  for (const p of c.writable) mounts.push({ kind: "rw-try", src: p, dest: p });
  mounts.push({ kind: "rw", src: c.cwd, dest: c.cwd }, ...extra);

  // One mount per destination (the strongest); then shallowest first.
  const byDest = new Map<string, Mount>();
  for (const m of mounts) {
    const seen = byDest.get(m.dest);
    if (!seen || ORDER[m.kind] >= ORDER[seen.kind]) byDest.set(m.dest, m);
  }
  const ordered = [...byDest.values()].sort((a, b) => depth(a.dest) - depth(b.dest) || ORDER[a.kind] - ORDER[b.kind]);

  const args = ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"];
  if (!c.network) args.push("--unshare-net");
  for (const m of ordered) {
    if (m.kind === "symlink") args.push("--symlink", m.src, m.dest);
    else if (m.kind === "proc" || m.kind === "dev" || m.kind === "tmpfs") args.push(`--${m.kind}`, m.dest);
    else args.push({ ro: "--ro-bind", "ro-try": "--ro-bind-try", rw: "--bind", "rw-try": "--bind-try" }[m.kind], m.src, m.dest);
  }
  args.push("--chdir", c.cwd);
  return args;
}

/**
 * Starts a CLI inside bubblewrap. With the network off and model APIs to
 * reach, the worker listens on Unix sockets in a private folder (0700, mounted
 * at /run/svc-net) and the forwarder inside offers them on loopback: each
 * loopback API on its own port, remote ones through a CONNECT proxy
 * (HTTPS_PROXY) that lets through only their hosts.
 */
export async function launchInBubblewrap(bwrap: string, c: Confinement, args: string[], env: NodeJS.ProcessEnv): Promise<Launched> {
  const launchedEnv: NodeJS.ProcessEnv = { ...env, TMPDIR: "/tmp" };
  let command = [c.command, ...c.prefix, ...args];
  const extra: Mount[] = [];
  const servers: net.Server[] = [];
  let dir: string | undefined;
  const cleanup = async () => {
    await closeAll(servers);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  };

  if (!c.network && c.apis.length > 0) {
    try {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-net-"));
      const routes: string[] = [];
      const loopbackPorts = new Set<number>();
      for (const api of c.apis.filter((a) => a.loopback)) {
        if (loopbackPorts.has(api.port)) continue;
        loopbackPorts.add(api.port);
        servers.push(await listen(pipeServer(api.host, api.port), path.join(dir, `port-${api.port}`)));
        routes.push(`${api.port}=${INSIDE_NET}/port-${api.port}`);
      }
      const remote = c.apis.filter((a) => !a.loopback);
      if (remote.length > 0) {
        const port = PROXY_PORTS.find((p) => !loopbackPorts.has(p)) as number;
        servers.push(await listen(modelApiProxy(remote), path.join(dir, "proxy")));
        routes.push(`${port}=${INSIDE_NET}/proxy`);
        Object.assign(launchedEnv, proxyEnv(port));
      }
      command = [process.execPath, ...FORWARDER.args, ...routes, "--", ...command];
      extra.push({ kind: "rw", src: dir, dest: INSIDE_NET }, { kind: "ro", src: FORWARDER.file, dest: FORWARDER.file });
    } catch (err) {
      await cleanup();
      throw err;
    }
  }
  return { command: bwrap, args: [...bubblewrapArgs(c, extra), "--", ...command], cwd: c.cwd, env: launchedEnv, cleanup };
}
