import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import lockfile from "proper-lockfile";
import { ROOT } from "../paths.js";

/**
 * What the files the service hands out (the worker, the SDK) share: built from this
 * tree into a gitignored folder beside their sources, vouched for by a manifest
 * naming the hash of everything they are built from, rebuilt when missing or stale,
 * one build at a time across the processes sharing the folder, served from memory.
 */

export interface ReleaseFile {
  name: string;
  size: number;
  /** Hex SHA-256 of the file (its ETag). */
  sha256: string;
  /** Subresource-integrity form, sha512 (what npm records in a lockfile). */
  integrity: string;
}

export const readJson = <T>(file: string): T => JSON.parse(fs.readFileSync(file, "utf8")) as T;

function filesUnder(rel: string): string[] {
  const abs = path.join(ROOT, rel);
  if (!fs.existsSync(abs)) return [];
  if (!fs.statSync(abs).isDirectory()) return [rel];
  return fs
    .readdirSync(abs, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)));
}

/** A hash of the files under `inputs` (paths from the repository's root): names and bytes. */
export function hashInputs(inputs: readonly string[]): string {
  const hash = crypto.createHash("sha256");
  for (const rel of inputs.flatMap(filesUnder).sort()) {
    hash.update(`${rel.split(path.sep).join("/")}\0`);
    hash.update(fs.readFileSync(path.join(ROOT, rel)));
    hash.update("\0");
  }
  return hash.digest("hex");
}

export function describeFile(name: string, bytes: Buffer): ReleaseFile {
  return {
    name,
    size: bytes.length,
    sha256: crypto.createHash("sha256").update(bytes).digest("hex"),
    integrity: `sha512-${crypto.createHash("sha512").update(bytes).digest("base64")}`,
  };
}

/** Writes a file whole or not at all: a reader (another instance) never sees half of it. */
export function writeAtomically(file: string, data: string | Buffer): void {
  const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString("hex")}.tmp`;
  fs.writeFileSync(tmp, data, { mode: 0o644 });
  fs.renameSync(tmp, file);
}

/** Whether each file is in `dir` at the size its manifest says. */
export const filesPresent = (dir: string, files: ReleaseFile[]): boolean =>
  files.every((f) => {
    try {
      return fs.statSync(path.join(dir, f.name)).size === f.size;
    } catch {
      return false;
    }
  });

/** The current build's manifest: as found, or built now under the folder's lock (one that waited finds the other's build). */
export async function currentOrBuilt<M>(dir: string, current: () => M | null, build: () => Promise<M>): Promise<M> {
  const found = current();
  if (found) return found;
  fs.mkdirSync(dir, { recursive: true });
  const release = await lockfile.lock(dir, { stale: 120_000, retries: { retries: 120, minTimeout: 250, maxTimeout: 1000 }, lockfilePath: path.join(dir, ".build.lock") });
  try {
    return current() ?? (await build());
  } finally {
    await release();
  }
}

/** A file of a build, read whole; replaced since its manifest was read (another build), it fails rather than serve other bytes. */
export function readVerified(dir: string, f: ReleaseFile): Buffer {
  const bytes = fs.readFileSync(path.join(dir, f.name));
  if (crypto.createHash("sha256").update(bytes).digest("hex") !== f.sha256) throw new Error(`${f.name} does not match its manifest`);
  return bytes;
}
