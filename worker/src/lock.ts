import fs from "node:fs";
import path from "node:path";

/**
 * One `svc-worker start` per config folder: a second one on the same pairing
 * would replace the first's connection, which would reconnect and replace it in
 * turn, for ever. The lock file holds the owner's pid; a dead owner's lock is taken over.
 */
export function lockServing(dir: string): { ok: true; release(): void } | { ok: false; pid: number } {
  const file = path.join(dir, "worker.lock");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(file, String(process.pid), { flag: "wx", mode: 0o600 });
      const release = () => {
        try {
          if (fs.readFileSync(file, "utf8") === String(process.pid)) fs.unlinkSync(file);
        } catch {
          // already gone
        }
      };
      process.once("exit", release);
      return { ok: true, release };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const pid = Number(fs.readFileSync(file, "utf8"));
      if (Number.isInteger(pid) && pid > 0 && alive(pid)) return { ok: false, pid };
      fs.rmSync(file, { force: true });
    }
  }
  throw new Error(`could not take ${file}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  return !zombie(pid);
}

/**
 * A process that exited but was not reaped yet (Linux: state `Z`): a worker killed with
 * SIGKILL whose parent is gone stays one under an init that does not reap (a container's).
 */
function zombie(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
  } catch {
    return false;
  }
}
