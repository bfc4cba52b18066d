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

/**
 * The embedded database allows one process per data folder: whoever opens it
 * holds this lock (refreshed while alive, stale 10 s after its holder died).
 */
export async function lockDataDir(dataDir: string, onCompromised: (err: Error) => void): Promise<() => Promise<void>> {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    return await lockfile.lock(dataDir, {
      lockfilePath: path.join(dataDir, "svc.lock"),
      stale: 10_000,
      update: 2_000,
      retries: 0,
      realpath: false,
      onCompromised,
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ELOCKED") throw new DataDirLockedError(dataDir);
    throw err;
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
