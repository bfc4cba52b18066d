import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/**
 * The agent CLIs' own session files on this machine, and their deletion: a kept session
 * (`../sessions.ts`) or a resumable job's session, once it will not be resumed.
 * Only the files of the one session named are touched, and only under the CLI's own folders.
 */

/**
 * A session or thread id that names files safely: letters, digits, `-` and `_`, at least 8 of
 * them (both CLIs use UUIDs). Anything else (empty, a path, `..`, a fragment short enough to
 * match other sessions' file names) deletes nothing.
 */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{7,127}$/;

/**
 * Deletes Claude Code's session `id`: `<HOME>/.claude/projects/<any folder>/<id>.jsonl`
 * (its transcript) and the folder `<HOME>/.claude/projects/<any folder>/<id>` beside it.
 * HOME is `env.HOME`, else the user's home.
 */
export function forgetClaudeSession(id: string, env: NodeJS.ProcessEnv): void {
  if (!SAFE_ID.test(id)) return;
  const projects = path.join(env.HOME || os.homedir(), ".claude", "projects");
  let folders: fs.Dirent[] = [];
  try {
    folders = fs.readdirSync(projects, { withFileTypes: true });
  } catch {
    return;
  }
  for (const folder of folders) {
    if (!folder.isDirectory()) continue;
    fs.rmSync(path.join(projects, folder.name, `${id}.jsonl`), { force: true });
    fs.rmSync(path.join(projects, folder.name, id), { recursive: true, force: true });
  }
}

/**
 * Deletes Codex's thread `threadId`: its rollout files, `<CODEX_HOME>/sessions/<yyyy>/<mm>/<dd>/rollout-<time>-<thread>.jsonl`
 * (any file whose name contains the thread id, at most three folders down). CODEX_HOME is
 * `env.CODEX_HOME`, else `<HOME>/.codex`. An empty thread id deletes nothing.
 */
export function forgetCodexSession(threadId: string, env: NodeJS.ProcessEnv): void {
  if (!SAFE_ID.test(threadId)) return;
  const sessions = path.join(env.CODEX_HOME || path.join(env.HOME || os.homedir(), ".codex"), "sessions");
  const walk = (dir: string, depth: number) => {
    let entries: fs.Dirent[] = [];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (e.isDirectory() && depth < 3) walk(path.join(dir, e.name), depth + 1);
      else if (e.isFile() && e.name.includes(threadId)) fs.rmSync(path.join(dir, e.name), { force: true });
    }
  };
  walk(sessions, 0);
}

/**
 * Deletes the CLI session `id` of the runtime named: `claude-code...` (`claude-code`,
 * `claude-code-local`) Claude Code's, `codex...` Codex's; any other runtime keeps no files.
 */
export function forgetCliSession(runtime: string, id: string, env: NodeJS.ProcessEnv): void {
  if (runtime.startsWith("claude-code")) forgetClaudeSession(id, env);
  else if (runtime.startsWith("codex")) forgetCodexSession(id, env);
}
