import fs from "node:fs";
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

/** The admin socket of the server holding a data folder (the CLI talks to it). */
export function adminSocketPath(dataDir: string): string {
  return path.join(dataDir, "admin.sock");
}
