import os from "node:os";

/** What stands for what was taken out. */
const PATH_MARK = "<path>";
const USER_MARK = "<user>";
const HOST_MARK = "<host>";
const ENV_MARK = "<env>";

/** Environment values shorter than this are left (`1`, `true`, `C.UTF-8`): too common to say anything, too common to find safely. */
const MIN_ENV_VALUE = 8;

/** Names whose values are not the machine's (or are taken out as paths anyway). */
const PLAIN_ENV = new Set(["PATH", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PWD", "OLDPWD", "SHLVL", "_", "COLORTERM", "TERM_PROGRAM"]);

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * A machine-side text as the app may see it: paths, the user's name, the host's name
 * and the values of the worker's environment taken out. The worker keeps the whole
 * text in its own terminal and log; only this reaches the service (a job's failure, a
 * runtime that cannot run), so nothing of the end user's machine reaches the app.
 *
 * Paths: any absolute path (`/home/alice/.local/bin/claude`, `C:\Users\alice\...`,
 * `~/...`), not a URL's path (`https://api.example.com/v1/messages` stays).
 */
export function redact(text: string, env: NodeJS.ProcessEnv = process.env): string {
  let out = text;
  // Values first (a secret may look like anything, and a path may hold one), longest first.
  const values = Object.entries(env)
    .filter(([name, v]) => !PLAIN_ENV.has(name) && typeof v === "string" && v.length >= MIN_ENV_VALUE && !/^\d+$/.test(v))
    .map(([, v]) => v as string)
    .sort((a, b) => b.length - a.length);
  for (const v of values) if (!v.startsWith("/")) out = out.split(v).join(ENV_MARK);
  // Windows paths, then POSIX paths not inside a URL, then HOME-relative ones.
  out = out.replace(/\b[A-Za-z]:\\[^\s'"`,;:)\]]*/g, PATH_MARK);
  out = out.replace(/(^|[^\w:/.~-])(\/(?:[^\s'"`,;:)\]/]+\/?)+)/g, (_, before: string) => `${before}${PATH_MARK}`);
  out = out.replace(/(^|[^\w])~\/[^\s'"`,;:)\]]*/g, (_, before: string) => `${before}${PATH_MARK}`);
  // Names: the user's and the host's, as whole words.
  const names = new Set<string>();
  for (const n of [env.USER, env.LOGNAME, env.USERNAME, safe(() => os.userInfo().username)]) if (n && n.length >= 2) names.add(n);
  for (const name of [...names].sort((a, b) => b.length - a.length)) out = out.replace(new RegExp(`(?<![\\w-])${escape(name)}(?![\\w-])`, "g"), USER_MARK);
  const host = safe(() => os.hostname());
  if (host && host.length >= 2 && host !== "localhost") out = out.replace(new RegExp(`(?<![\\w-])${escape(host)}(?![\\w-])`, "g"), HOST_MARK);
  return out;
}

function safe(f: () => string): string | undefined {
  try {
    return f();
  } catch {
    return undefined;
  }
}
