import type { Command } from "commander";
import { machinePolicy, type MachinePolicy } from "./policy/index.js";
import { defaultPolicy } from "./policy/schema.js";
import { expireSessions, forgetAllSessions, forgetSession, isSessionId, SessionBook, type KeptSession } from "./sessions.js";
import type { Store } from "./store.js";

/** How often `start` forgets the sessions past `sessions.keepDays` while it serves. */
export const EXPIRY_INTERVAL_MS = 60 * 60 * 1000;

const DAY_MS = 24 * 60 * 60 * 1000;

/** The user's current policy, as the connection applies it: its `sessions.keepDays`, and the environment the CLIs' files are found from. */
const policyOf = (store: Store): MachinePolicy => machinePolicy(store.readSettings().policy ?? defaultPolicy());

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const when = (at: Date) => at.toISOString().replace(/\.\d+Z$/, "Z");

function ago(ms: number): string {
  const minutes = Math.max(0, Math.round(ms / 60_000));
  if (minutes === 0) return "just now";
  if (minutes < 60) return `${plural(minutes, "minute")} ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${plural(hours, "hour")} ago`;
  return `${plural(Math.round(hours / 24), "day")} ago`;
}

function expiry(s: KeptSession, keepDays: number, now: Date): string {
  if (keepDays === 0) return "forgotten at the next expiry (sessions.keepDays is 0)";
  const at = new Date(Date.parse(s.lastUsedAt) + keepDays * DAY_MS);
  return at.getTime() <= now.getTime() ? "expired: forgotten at the next expiry (a running `svc-worker start` does it hourly)" : `expires ${when(at)}`;
}

/**
 * `svc-worker sessions`: the agent CLI sessions kept on this machine between runs
 * (conversations), listed, and forgotten one by one or all at once: their entry in
 * `sessions.json` and the CLI's own files. Ids from the command line are checked to be
 * session ids (UUIDs) before anything is touched.
 */
export function registerSessionsCommand(program: Command, storeOf: () => Store, out: (line: string) => void): void {
  const sessions = program
    .command("sessions")
    .description("List the agent CLI sessions kept on this machine so a follow-up run can resume them, or forget them.");

  sessions.action(() => {
    const store = storeOf();
    const book = new SessionBook(store.dir);
    const { keepDays } = policyOf(store).policy.sessions;
    const kept = book.list();
    const rule = keepDays ? `kept ${plural(keepDays, "day")} after their last use` : "not kept: deleted at each run's end";
    if (!kept.length) {
      out(`No sessions kept. (sessions.keepDays = ${keepDays}: ${rule}; \`svc-worker policy set sessions.keepDays <days>\` changes it.)`);
      return;
    }
    const now = new Date();
    out(`${plural(kept.length, "session")} kept on this machine (${book.path}): the CLIs' own files here, never sent to the service; ${rule} (sessions.keepDays = ${keepDays}).`);
    for (const s of kept) {
      out(`  ${s.id}  ${s.runtime}  in ${s.workdir}`);
      out(`      last used ${when(new Date(s.lastUsedAt))} (${ago(now.getTime() - Date.parse(s.lastUsedAt))}); ${expiry(s, keepDays, now)}`);
    }
    out("Forget one with `svc-worker sessions forget <id>`, all of them with `svc-worker sessions forget --all`.");
  });

  sessions
    .command("forget [id]")
    .description("Forget one kept session (its CLI's files on this machine too), or all of them with --all.")
    .option("--all", "forget every kept session")
    .action((id: string | undefined, opts: { all?: boolean }) => {
      if (opts.all && id !== undefined) program.error("Give a session's id or --all, not both.", { exitCode: 2 });
      if (!opts.all && id === undefined) program.error("Which session? Give its id (`svc-worker sessions` lists them), or --all.", { exitCode: 2 });
      if (id !== undefined && !isSessionId(id)) {
        program.error(`${JSON.stringify(id)} is not a session id (a UUID, such as 0b7e2d64-4f7a-4c1e-9a3b-5d2f8e6c1a90); \`svc-worker sessions\` lists them. Nothing was forgotten.`, { exitCode: 2 });
      }
      const store = storeOf();
      const book = new SessionBook(store.dir);
      const env = policyOf(store).allowedEnv;
      if (opts.all) {
        const n = forgetAllSessions(book, env);
        out(n ? `✓ Forgot ${plural(n, "kept session")} and their CLI files.` : "No sessions kept; nothing to forget.");
        const left = book.list().length;
        if (left) {
          out(`! ${plural(left, "session")} could not be deleted (its files' permissions?); \`svc-worker sessions\` lists them.`);
          process.exitCode = 1;
        }
        return;
      }
      const forgotten = forgetSession(book, id!, env);
      if (!forgotten) program.error(`No session ${id} is kept on this machine. \`svc-worker sessions\` lists the kept ones.`, { exitCode: 1 });
      out(`✓ Forgot session ${forgotten!.id} (${forgotten!.runtime}, in ${forgotten!.workdir}) and its CLI files.`);
    });
}

/** `unpair`: every kept session forgotten, said in one line. */
export function forgetSessionsOnUnpair(store: Store, out: (line: string) => void): void {
  const book = new SessionBook(store.dir);
  const n = forgetAllSessions(book, policyOf(store).allowedEnv);
  const left = book.list().length;
  if (n || left) out(`Forgot ${plural(n, "kept session")} and their CLI files${left ? `; ${left} could not be deleted (\`svc-worker sessions\` lists them)` : ""}.`);
  else out("No sessions were kept here.");
}

/**
 * `start`: the sessions past `sessions.keepDays` (the policy as it is at each pass) forgotten now,
 * then every hour while serving, one line when any was; stopped with `signal`.
 */
export function expireSessionsWhileServing(store: Store, policyNow: () => MachinePolicy, out: (line: string) => void, signal: AbortSignal): void {
  const book = new SessionBook(store.dir);
  const expire = () => {
    try {
      const policy = policyNow();
      const { keepDays } = policy.policy.sessions;
      const n = expireSessions(book, keepDays, policy.allowedEnv);
      if (n) out(`Forgot ${plural(n, "kept session")} ${keepDays ? `unused for more than ${plural(keepDays, "day")}` : "(sessions.keepDays is 0)"}, and their CLI files.`);
    } catch (err) {
      out(`! Could not forget expired sessions (${(err as Error).message}); trying again in an hour.`);
    }
  };
  if (signal.aborted) return;
  expire();
  const timer = setInterval(expire, EXPIRY_INTERVAL_MS);
  timer.unref();
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}
