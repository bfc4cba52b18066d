import fs from "node:fs";
import path from "node:path";
import { z } from "zod";
import { forgetCliSession } from "./runtimes/session-files.js";

/**
 * The agent CLI sessions this worker keeps between runs (conversations), so a follow-up run
 * can resume one: `sessions.json` in the worker's folder (0600, folder 0700). Each entry names
 * the CLI's own session files on this machine (never sent to the service); forgetting one
 * deletes them. The user's `sessions.keepDays` says how long one stays after its last use.
 *
 * The file is read on every call: `svc-worker sessions forget` (another process) changes it
 * while `start` runs. Writes go to a temporary file renamed over it, under a short lock file,
 * so two processes neither half-write it nor undo each other's change.
 */

export interface KeptSession {
  /** The session's id (a UUID, the service's). */
  id: string;
  /** The runtime it ran on (`claude-code`, `codex`, `claude-code-local`...). */
  runtime: string;
  /** The CLI's own session (Claude Code) or thread (Codex) id, when not `id`. */
  cliId?: string;
  /** The working folder it ran in. */
  workdir: string;
  createdAt: string;
  lastUsedAt: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A CLI's session or thread id: what `runtimes/session-files.ts` accepts as a file name. */
const CLI_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{7,127}$/;

/** Whether `id` is a session id (a UUID): checked before an id from the command line touches anything. */
export const isSessionId = (id: string): boolean => UUID.test(id);

const Entry = z
  .object({
    id: z.string().regex(UUID),
    runtime: z.string().min(1).max(128),
    cliId: z.string().regex(CLI_ID).optional(),
    workdir: z.string().min(1),
    createdAt: z.string().datetime(),
    lastUsedAt: z.string().datetime(),
  })
  .strip();

const DAY_MS = 24 * 60 * 60 * 1000;
/** How long a writer waits for another's lock before going ahead, and when a lock is a dead process's. */
const LOCK_WAIT_MS = 2000;
const LOCK_STALE_MS = 10_000;

const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

export class SessionBook {
  constructor(readonly dir: string) {}

  get path(): string {
    return path.join(this.dir, "sessions.json");
  }

  get(id: string): KeptSession | null {
    const key = id.toLowerCase();
    return this.read().find((s) => s.id === key) ?? null;
  }

  /** Records a session as used now: added, or its entry updated (its `createdAt` kept). */
  keep(entry: { id: string; runtime: string; cliId?: string; workdir: string }, now: Date = new Date()): void {
    const id = entry.id.toLowerCase();
    if (!UUID.test(id)) throw new Error(`Cannot keep session ${JSON.stringify(entry.id)}: a session id is a UUID.`);
    if (entry.cliId !== undefined && !CLI_ID.test(entry.cliId)) throw new Error(`Cannot keep session ${id}: its CLI id ${JSON.stringify(entry.cliId)} is not one.`);
    this.update((all) => {
      const before = all.find((s) => s.id === id);
      const at = now.toISOString();
      const next: KeptSession = { id, runtime: entry.runtime, ...(entry.cliId !== undefined ? { cliId: entry.cliId } : {}), workdir: entry.workdir, createdAt: before?.createdAt ?? at, lastUsedAt: at };
      return [...all.filter((s) => s.id !== id), next];
    });
  }

  /** Drops a session's entry (not its files: `forgetSession` does both); the entry it was, or null. */
  remove(id: string): KeptSession | null {
    const key = id.toLowerCase();
    let removed: KeptSession | null = null;
    this.update((all) => {
      removed = all.find((s) => s.id === key) ?? null;
      return removed ? all.filter((s) => s.id !== key) : null;
    });
    return removed;
  }

  /** Every kept session, the most recently used first. */
  list(): KeptSession[] {
    return this.read().sort((a, b) => Date.parse(b.lastUsedAt) - Date.parse(a.lastUsedAt));
  }

  /** The sessions unused for more than `keepDays` days (keepDays 0: every one), the oldest first. */
  expired(keepDays: number, now: Date = new Date()): KeptSession[] {
    return this.list()
      .filter((s) => keepDays <= 0 || now.getTime() - Date.parse(s.lastUsedAt) > keepDays * DAY_MS)
      .reverse();
  }

  /** The entries in the file; a missing, unreadable or invalid file is none (and replaced on the next write), an invalid entry is dropped. */
  private read(): KeptSession[] {
    let raw: unknown;
    try {
      raw = JSON.parse(fs.readFileSync(this.path, "utf8"));
    } catch {
      return [];
    }
    const list = raw && typeof raw === "object" && Array.isArray((raw as { sessions?: unknown }).sessions) ? (raw as { sessions: unknown[] }).sessions : [];
    const seen = new Set<string>();
    const entries: KeptSession[] = [];
    for (const item of list) {
      const parsed = Entry.safeParse(item);
      if (!parsed.success) continue;
      const entry = { ...parsed.data, id: parsed.data.id.toLowerCase() };
      if (seen.has(entry.id)) continue;
      seen.add(entry.id);
      entries.push(entry);
    }
    return entries;
  }

  /** Read, changed (`change` returns null: nothing to write) and written back, under the lock. */
  private update(change: (all: KeptSession[]) => KeptSession[] | null): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    fs.chmodSync(this.dir, 0o700);
    const unlock = this.lock();
    try {
      const next = change(this.read());
      if (!next) return;
      const tmp = `${this.path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
      try {
        fs.writeFileSync(tmp, `${JSON.stringify({ sessions: next }, null, 2)}\n`, { mode: 0o600, flag: "wx" });
        fs.chmodSync(tmp, 0o600);
        fs.renameSync(tmp, this.path);
      } catch (err) {
        fs.rmSync(tmp, { force: true });
        throw err;
      }
    } finally {
      unlock();
    }
  }

  /** `sessions.json.lock`, created exclusively; a lock older than LOCK_STALE_MS is a dead writer's and taken over. */
  private lock(): () => void {
    const file = `${this.path}.lock`;
    const deadline = Date.now() + LOCK_WAIT_MS;
    for (;;) {
      try {
        fs.closeSync(fs.openSync(file, "wx", 0o600));
        return () => fs.rmSync(file, { force: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
      try {
        if (Date.now() - fs.statSync(file).mtimeMs > LOCK_STALE_MS) {
          fs.rmSync(file, { force: true });
          continue;
        }
      } catch {
        continue; // gone meanwhile: try again
      }
      // Held past the wait: a writer holds it for milliseconds, so go ahead rather than fail the run.
      if (Date.now() > deadline) return () => {};
      sleep(20);
    }
  }
}

/** Forgets one session: its entry and the CLI's own files (`forgetCliSession` with cliId ?? id). Its entry, or null when none is kept. */
export function forgetSession(book: SessionBook, id: string, env: NodeJS.ProcessEnv): KeptSession | null {
  const entry = book.get(id);
  if (!entry) return null;
  // The files first: should deleting them fail, the entry stays, and the next expiry tries again.
  forgetCliSession(entry.runtime, entry.cliId ?? entry.id, env);
  return book.remove(entry.id) ?? entry;
}

/** Forgets every session past keepDays (keepDays 0: every session); returns how many. */
export function expireSessions(book: SessionBook, keepDays: number, env: NodeJS.ProcessEnv, now: Date = new Date()): number {
  return forgetEach(book, book.expired(keepDays, now), env);
}

/** Forgets them all (unpair); returns how many. */
export function forgetAllSessions(book: SessionBook, env: NodeJS.ProcessEnv): number {
  return forgetEach(book, book.list(), env);
}

/** One that cannot be deleted (its files' permissions) is left, the others still forgotten. */
function forgetEach(book: SessionBook, entries: KeptSession[], env: NodeJS.ProcessEnv): number {
  let n = 0;
  for (const entry of entries) {
    try {
      if (forgetSession(book, entry.id, env)) n++;
    } catch {
      // left for the next time
    }
  }
  return n;
}
