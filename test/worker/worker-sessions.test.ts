import fs from "node:fs";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs, tempDir } from "../helpers/process.js";
import { expireSessions, forgetAllSessions, forgetSession, SessionBook } from "../../worker/src/sessions.js";
import { forgetCliSession } from "../../worker/src/runtimes/session-files.js";

/**
 * Conversations on the user's machine: the agent CLI sessions the worker keeps between runs
 * (`sessions.json`), expired past the user's `sessions.keepDays` with the CLIs' own files, and
 * `svc-worker sessions` listing and forgetting them. Real files in a temporary HOME (fake
 * Claude Code transcripts, a fake Codex rollout) and a temporary config folder.
 */

const DAY = 24 * 60 * 60 * 1000;
const NOW = new Date("2026-12-06T12:00:00Z");
const daysAgo = (n: number) => new Date(NOW.getTime() - n * DAY);

const ids = {
  oldClaude: "11111111-1111-4111-8111-111111111111",
  oldCodex: "22222222-2222-4222-8222-222222222222",
  fresh: "33333333-3333-4333-8333-333333333333",
};
const thread = "0199a213-81c0-7800-8aa1-bbab2a035a53";
const otherThread = "0199a213-81c0-7800-8aa1-000000000000";

/** A temporary HOME with the CLIs' own files: Claude Code's transcripts and session folders, Codex's rollouts. */
function fakeHome() {
  const home = tempDir("svc-sessions-home-");
  const projects = path.join(home, ".claude", "projects", "-x");
  const rollouts = path.join(home, ".codex", "sessions", "2026", "12", "06");
  fs.mkdirSync(projects, { recursive: true });
  fs.mkdirSync(rollouts, { recursive: true });
  const claude = (id: string) => {
    fs.writeFileSync(path.join(projects, `${id}.jsonl`), "{}\n");
    fs.mkdirSync(path.join(projects, id, "subagents"), { recursive: true });
    fs.writeFileSync(path.join(projects, id, "subagents", "a.jsonl"), "{}\n");
    return [path.join(projects, `${id}.jsonl`), path.join(projects, id)];
  };
  const codex = (t: string) => {
    const file = path.join(rollouts, `rollout-2026-12-06T10-00-00-${t}.jsonl`);
    fs.writeFileSync(file, "{}\n");
    return [file];
  };
  const files = {
    oldClaude: claude(ids.oldClaude),
    fresh: claude(ids.fresh),
    oldCodex: codex(thread),
    // Another thread's rollout, and a file named like no session: never touched.
    otherThread: codex(otherThread),
    stray: [path.join(projects, "not-a-uuid.jsonl")],
  };
  fs.writeFileSync(files.stray[0], "{}\n");
  return { home, files, env: { HOME: home } as NodeJS.ProcessEnv };
}

/** A config folder keeping the three sessions: two unused for 10 and 9 days, one used yesterday. */
function keptBook(workdir = "/home/me/project") {
  const dir = tempDir("svc-sessions-config-");
  const book = new SessionBook(dir);
  book.keep({ id: ids.oldClaude, runtime: "claude-code", workdir }, daysAgo(10));
  book.keep({ id: ids.oldCodex, runtime: "codex", cliId: thread, workdir }, daysAgo(9));
  book.keep({ id: ids.fresh, runtime: "claude-code-local", workdir }, daysAgo(1));
  return { dir, book };
}

const exists = (files: string[]) => files.map((f) => fs.existsSync(f));

afterAll(() => removeTempDirs());

describe("the sessions a worker keeps", () => {
  it("keeps, updates, lists the most recent first, and removes, in a private file; an invalid file counts as empty and is replaced", () => {
    const dir = tempDir("svc-sessions-config-");
    const book = new SessionBook(path.join(dir, "nested"));
    expect(book.list()).toEqual([]);
    expect(book.get(ids.fresh)).toBeNull();

    book.keep({ id: ids.oldClaude, runtime: "claude-code", workdir: "/w" }, daysAgo(3));
    book.keep({ id: ids.oldCodex, runtime: "codex", cliId: thread, workdir: "/w" }, daysAgo(2));
    expect(fs.statSync(book.path).mode & 0o777).toBe(0o600);
    expect(fs.statSync(path.join(dir, "nested")).mode & 0o777).toBe(0o700);
    expect(book.get(ids.oldCodex)).toEqual({ id: ids.oldCodex, runtime: "codex", cliId: thread, workdir: "/w", createdAt: daysAgo(2).toISOString(), lastUsedAt: daysAgo(2).toISOString() });
    expect(book.list().map((s) => s.id)).toEqual([ids.oldCodex, ids.oldClaude]);

    // Used again: the last use moves, the creation stays, and it comes first.
    book.keep({ id: ids.oldClaude, runtime: "claude-code", workdir: "/w2" }, daysAgo(1));
    expect(book.get(ids.oldClaude)).toMatchObject({ workdir: "/w2", createdAt: daysAgo(3).toISOString(), lastUsedAt: daysAgo(1).toISOString() });
    expect(book.list().map((s) => s.id)).toEqual([ids.oldClaude, ids.oldCodex]);

    // Another process's change is seen: the file is read on every call.
    expect(new SessionBook(path.join(dir, "nested")).remove(ids.oldCodex)?.id).toBe(ids.oldCodex);
    expect(book.get(ids.oldCodex)).toBeNull();
    expect(book.remove(ids.oldCodex)).toBeNull();

    expect(() => book.keep({ id: "../../etc", runtime: "claude-code", workdir: "/w" })).toThrow(/UUID/);
    expect(() => book.keep({ id: ids.fresh, runtime: "codex", cliId: "../x", workdir: "/w" })).toThrow(/CLI id/);
    expect(book.list().map((s) => s.id)).toEqual([ids.oldClaude]);

    fs.writeFileSync(book.path, "{ not json");
    expect(book.list()).toEqual([]);
    book.keep({ id: ids.fresh, runtime: "codex", workdir: "/w" }, NOW);
    expect(JSON.parse(fs.readFileSync(book.path, "utf8")).sessions.map((s: { id: string }) => s.id)).toEqual([ids.fresh]);
    expect(fs.readdirSync(path.join(dir, "nested")).sort()).toEqual(["sessions.json"]);
  });

  it("expires the sessions unused past keepDays with their CLI files, and keeps the fresh one's (keepDays 0: all)", () => {
    const { files, env } = fakeHome();
    const { book } = keptBook();
    expect(book.expired(7, NOW).map((s) => s.id)).toEqual([ids.oldClaude, ids.oldCodex]);
    expect(book.expired(9.5, NOW).map((s) => s.id)).toEqual([ids.oldClaude]);

    expect(expireSessions(book, 7, env, NOW)).toBe(2);
    expect(exists([...files.oldClaude, ...files.oldCodex])).toEqual([false, false, false]);
    // The positive control: the fresh session's files, another thread's rollout and a stray file are all still there.
    expect(exists([...files.fresh, ...files.otherThread, ...files.stray])).toEqual([true, true, true, true]);
    expect(book.list().map((s) => s.id)).toEqual([ids.fresh]);
    expect(expireSessions(book, 7, env, NOW)).toBe(0);

    expect(expireSessions(book, 0, env, NOW)).toBe(1);
    expect(exists(files.fresh)).toEqual([false, false]);
    expect(book.list()).toEqual([]);
    expect(exists([...files.otherThread, ...files.stray])).toEqual([true, true]);
  });

  it("forgets one (its entry and its files), or all; an id that names no session, or no safe file, deletes nothing", () => {
    const { files, env } = fakeHome();
    const { book } = keptBook();
    expect(forgetSession(book, ids.oldCodex, env)?.cliId).toBe(thread);
    expect(exists(files.oldCodex)).toEqual([false]);
    expect(forgetSession(book, ids.oldCodex, env)).toBeNull();

    for (const unsafe of ["", ".", "..", "../-x", "not-a-uuid".slice(0, 5), "0199"]) {
      forgetCliSession("claude-code", unsafe, env);
      forgetCliSession("codex", unsafe, env);
    }
    forgetCliSession("ollama", ids.fresh, env);
    expect(exists([...files.oldClaude, ...files.fresh, ...files.otherThread, ...files.stray])).toEqual([true, true, true, true, true, true]);
    expect(fs.existsSync(path.join(env.HOME!, ".claude", "projects", "-x"))).toBe(true);

    expect(forgetAllSessions(book, env)).toBe(2);
    expect(exists([...files.oldClaude, ...files.fresh])).toEqual([false, false, false, false]);
    expect(exists([...files.otherThread, ...files.stray])).toEqual([true, true]);
    expect(book.list()).toEqual([]);
  });
});

describe("svc-worker sessions", () => {
  const workers: WorkerProcess[] = [];
  afterEach(() => {
    for (const w of workers.splice(0)) w.stop();
  });

  async function worker(config: string, home: string, ...args: string[]) {
    const w = spawnWorker(args, config, { HOME: home });
    workers.push(w);
    const { code } = await w.exited;
    return { code, out: w.stdout, err: w.stderr };
  }

  it("lists the kept sessions, forgets one with its files, refuses an unknown or malformed id, and forgets all", async () => {
    const { home, files } = fakeHome();
    // Used now, so the listing's expiry dates are ahead.
    const dir = tempDir("svc-sessions-config-");
    const book = new SessionBook(dir);
    book.keep({ id: ids.oldClaude, runtime: "claude-code", workdir: "/home/me/project" }, new Date(Date.now() - 2 * DAY));
    book.keep({ id: ids.oldCodex, runtime: "codex", cliId: thread, workdir: "/home/me/other" });

    const [list, malformed, unknown, none] = await Promise.all([
      worker(dir, home, "sessions"),
      worker(dir, home, "sessions", "forget", "not-a-uuid"),
      worker(dir, home, "sessions", "forget", ids.fresh),
      worker(dir, home, "sessions", "forget"),
    ]);
    expect(list.code).toBe(0);
    expect(list.out).toContain("2 sessions kept on this machine");
    expect(list.out).toContain("kept 7 days after their last use (sessions.keepDays = 7)");
    expect(list.out).toMatch(new RegExp(`${ids.oldCodex}  codex  in /home/me/other\\n.*last used .*\\((just now|\\d+ minutes? ago)\\); expires 20`));
    expect(list.out).toMatch(new RegExp(`${ids.oldClaude}  claude-code  in /home/me/project\\n.*\\(2 days ago\\); expires 20`));
    // The most recently used first.
    expect(list.out.indexOf(ids.oldCodex)).toBeLessThan(list.out.indexOf(ids.oldClaude));

    expect(malformed.code).toBe(2);
    expect(malformed.err).toContain('"not-a-uuid" is not a session id');
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain(`No session ${ids.fresh} is kept on this machine. \`svc-worker sessions\` lists the kept ones.`);
    expect(none.code).toBe(2);
    // Nothing was deleted by any of them: not the stray file named like the malformed id, not the fresh session's files.
    expect(exists([...files.oldClaude, ...files.oldCodex, ...files.fresh, ...files.stray])).toEqual([true, true, true, true, true, true]);
    expect(book.list()).toHaveLength(2);

    const one = await worker(dir, home, "sessions", "forget", ids.oldCodex);
    expect(one.code).toBe(0);
    expect(one.out).toContain(`✓ Forgot session ${ids.oldCodex} (codex, in /home/me/other) and its CLI files.`);
    expect(exists(files.oldCodex)).toEqual([false]);
    expect(exists([...files.oldClaude, ...files.otherThread])).toEqual([true, true, true]);
    expect(book.list().map((s) => s.id)).toEqual([ids.oldClaude]);

    const all = await worker(dir, home, "sessions", "forget", "--all");
    expect(all.code).toBe(0);
    expect(all.out).toContain("✓ Forgot 1 kept session and their CLI files.");
    expect(exists(files.oldClaude)).toEqual([false, false]);
    expect(exists([...files.fresh, ...files.otherThread, ...files.stray])).toEqual([true, true, true, true]);

    const empty = await worker(dir, home, "sessions");
    expect(empty.code).toBe(0);
    expect(empty.out).toMatch(/^No sessions kept\./);
  });

  it("sessions.keepDays is the user's policy: set, shown, refused out of range, and what the listing counts from", async () => {
    const { home } = fakeHome();
    const { dir } = keptBook();
    const [shown, bad, tooMany] = await Promise.all([
      worker(dir, home, "policy"),
      worker(dir, home, "policy", "set", "sessions.keepDays", "three"),
      worker(dir, home, "policy", "set", "sessions.keepDays", "366"),
    ]);
    expect(shown.out).toContain("sessions.keepDays = 7 (default)");
    expect([bad.code, tooMany.code]).toEqual([2, 2]);
    expect(fs.existsSync(path.join(dir, "config.json"))).toBe(false);

    expect((await worker(dir, home, "policy", "set", "sessions.keepDays", "0")).code).toBe(0);
    expect(JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8")).policy).toEqual({ sessions: { keepDays: 0 } });
    const [policy, list] = await Promise.all([worker(dir, home, "policy"), worker(dir, home, "sessions")]);
    expect(policy.out).toMatch(/ {2}sessions\.keepDays = 0: /);
    expect(list.out).toContain("not kept: deleted at each run's end (sessions.keepDays = 0)");
    expect(list.out).toContain("forgotten at the next expiry (sessions.keepDays is 0)");
  });

  it("unpair forgets every kept session, and says how many, even when the service cannot be told", async () => {
    const { home, files } = fakeHome();
    const { dir } = keptBook();
    fs.writeFileSync(
      path.join(dir, "credentials.json"),
      JSON.stringify({ server: "http://127.0.0.1:1", connectUrl: "ws://127.0.0.1:1/v1/worker", machineId: "mch_gone", pairingToken: "pt_svc_x", environment: "test", appName: "Gone app", pairedAt: NOW.toISOString() }),
    );
    const unpair = await worker(dir, home, "unpair");
    expect(unpair.code).toBe(1);
    expect(unpair.out).toContain("Forgot the token here, but the service could not be told");
    expect(unpair.out).toContain("Forgot 3 kept sessions and their CLI files.");
    expect(exists([...files.oldClaude, ...files.oldCodex, ...files.fresh])).toEqual([false, false, false, false, false]);
    expect(exists([...files.otherThread, ...files.stray])).toEqual([true, true]);
    expect(new SessionBook(dir).list()).toEqual([]);
  });

  it("start forgets the sessions past keepDays as it begins, and keeps the fresh one", async () => {
    const { home, files } = fakeHome();
    const dir = tempDir("svc-sessions-config-");
    const book = new SessionBook(dir);
    book.keep({ id: ids.oldClaude, runtime: "claude-code", workdir: "/w" }, new Date(Date.now() - 10 * DAY));
    book.keep({ id: ids.oldCodex, runtime: "codex", cliId: thread, workdir: "/w" }, new Date(Date.now() - 9 * DAY));
    book.keep({ id: ids.fresh, runtime: "claude-code", workdir: "/w" }, new Date(Date.now() - DAY));
    fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify({ runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: false } }));
    // Paired with a service that is not there: it keeps trying to connect, which is all this needs.
    fs.writeFileSync(
      path.join(dir, "credentials.json"),
      JSON.stringify({ server: "http://127.0.0.1:1", connectUrl: "ws://127.0.0.1:1/v1/worker", machineId: "mch_x", pairingToken: "pt_svc_x", environment: "test", appName: "Some app", pairedAt: NOW.toISOString() }),
    );
    const w = spawnWorker(["start"], dir, { HOME: home });
    workers.push(w);
    await w.waitFor(/Forgot 2 kept sessions unused for more than 7 days, and their CLI files\./, 20_000);
    expect(exists([...files.oldClaude, ...files.oldCodex])).toEqual([false, false, false]);
    expect(exists(files.fresh)).toEqual([true, true]);
    expect(book.list().map((s) => s.id)).toEqual([ids.fresh]);
  });
});
