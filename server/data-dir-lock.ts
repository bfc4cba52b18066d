import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import lockfile from "proper-lockfile";

export class DataDirLockedError extends Error {
  constructor(readonly dataDir: string) {
    super(
      `The data folder ${dataDir} is in use by another svc process (the embedded database allows one process at a time).`,
    );
  }
}

/** Who holds a data folder's lock: beside the lock (proper-lockfile removes its lock folder with `rmdir`, so nothing goes inside it). */
interface Holder {
  pid: number;
  host: string;
  /** The process's start time as /proc/<pid>/stat gives it (Linux), or null: a pid reused by another process is not taken for the holder. */
  started: string | null;
  /** Its pid namespace (Linux, `/proc/self/ns/pid`), or null: a pid from another container sharing the folder and the host name means nothing here. */
  ns: string | null;
}

const STALE_MS = 10_000;

/**
 * The embedded database allows one process per data folder: whoever opens it
 * holds this lock (refreshed every 2 s while alive). Whether a lock is still held is
 * decided first by its holder: a process on this machine that is still alive holds it
 * however late its last refresh (a server creating and migrating a new database keeps
 * its event loop busy for many seconds on a loaded machine, and its folder must not be
 * taken then); one known dead has lost it (taken over within 2 s). Where the holder cannot
 * be checked (another machine or container sharing the folder, no /proc, no holder file),
 * the lock is stale 10 s after its last refresh.
 */
export async function lockDataDir(dataDir: string, onCompromised: (err: Error) => void): Promise<() => Promise<void>> {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const lockPath = path.join(dataDir, "svc.lock");
  const holderPath = path.join(dataDir, "svc.lock.holder");
  const holder = fs.existsSync(lockPath) ? readHolder(holderPath) : null;
  const state = holder ? holderState(holder) : "unknown";
  if (state === "alive") throw new DataDirLockedError(dataDir);
  let release: () => Promise<void>;
  try {
    release = await lockfile.lock(dataDir, {
      lockfilePath: lockPath,
      stale: state === "dead" ? 2_000 : STALE_MS,
      update: 2_000,
      // A holder just killed may have refreshed its lock less than 2 s ago.
      retries: state === "dead" ? { retries: 4, minTimeout: 500, maxTimeout: 1_000 } : 0,
      realpath: false,
      onCompromised,
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ELOCKED") throw new DataDirLockedError(dataDir);
    throw err;
  }
  const mine: Holder = { pid: process.pid, host: os.hostname(), started: processStarted(process.pid), ns: pidNamespace() };
  fs.writeFileSync(holderPath, JSON.stringify(mine), { mode: 0o600 });
  return async () => {
    fs.rmSync(holderPath, { force: true });
    await release();
  };
}

function readHolder(file: string): Holder | null {
  try {
    const h = JSON.parse(fs.readFileSync(file, "utf8")) as Partial<Holder>;
    if (typeof h.pid !== "number" || typeof h.host !== "string") return null;
    return { pid: h.pid, host: h.host, started: typeof h.started === "string" ? h.started : null, ns: typeof h.ns === "string" ? h.ns : null };
  } catch {
    return null;
  }
}

function holderState(h: Holder): "alive" | "dead" | "unknown" {
  if (h.host !== os.hostname() || h.ns === null || h.ns !== pidNamespace()) return "unknown";
  try {
    process.kill(h.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ESRCH") return "dead";
  }
  // The pid is in use: by the holder, unless it was reused (known only where the start time is) or it has exited (a zombie).
  const stat = procStat(h.pid);
  if (stat?.[0] === "Z") return "dead";
  const started = stat?.[19] ?? null;
  if (h.started === null || started === null) return "unknown";
  return started === h.started ? "alive" : "dead";
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), after the command's closing parenthesis; null off Linux. */
export function processStarted(pid: number): string | null {
  return procStat(pid)?.[19] ?? null;
}

function pidNamespace(): string | null {
  try {
    return fs.readlinkSync("/proc/self/ns/pid");
  } catch {
    return null;
  }
}

/** /proc/<pid>/stat's fields from the third (the state) on, or null off Linux or for no such process. */
function procStat(pid: number): string[] | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

// A Unix socket path must fit sun_path (108 bytes on Linux, 104 on macOS).
const MAX_SOCKET_PATH = 100;

/**
 * The admin socket of the server holding a data folder (the CLI talks to it):
 * `<dataDir>/admin.sock`, or, when that path is too long for a Unix socket, a
 * private folder (mode 0700) under the temp folder named after the data folder.
 */
export function adminSocketPath(dataDir: string): string {
  const inFolder = path.join(dataDir, "admin.sock");
  if (Buffer.byteLength(inFolder) <= MAX_SOCKET_PATH) return inFolder;
  const id = createHash("sha256").update(path.resolve(dataDir)).digest("hex").slice(0, 16);
  const uid = typeof process.getuid === "function" ? process.getuid() : 0;
  return path.join(os.tmpdir(), `svc-${uid}-${id}`, "admin.sock");
}
