import fs from "node:fs";
import { which } from "./policy/launchable.js";
import type { Store } from "./store.js";

/** How often the worker looks whether its settings, an agent CLI or the sandbox changed. */
export const WATCH_EVERY_MS = 3000;

/**
 * What, when it changes, changes what this machine can serve: config.json (the policy,
 * the runtimes' settings), each agent CLI the shell would find (its link, its real file
 * and that file's time: an update, an uninstall, a new install) and whether bubblewrap
 * is on PATH. Cheap to take (reads and stats, no process started).
 */
export function servedFingerprint(store: Store, env: NodeJS.ProcessEnv = process.env): string {
  const settings = store.readSettings();
  const parts: string[] = [JSON.stringify(settings)];
  const explicit = Object.values(settings.policy?.commands ?? {}).filter((p): p is string => typeof p === "string");
  for (const found of [which("claude", env.PATH), which("codex", env.PATH), ...explicit]) {
    parts.push(found ?? "-");
    if (!found) continue;
    try {
      const real = fs.realpathSync(found);
      parts.push(real, String(fs.statSync(real).mtimeMs));
    } catch {
      parts.push("gone");
    }
  }
  parts.push(which("bwrap", env.PATH) ?? "-");
  return parts.join("\n");
}

/**
 * Calls `changed` (one call at a time) whenever the fingerprint differs from the last
 * one seen, until `signal` aborts.
 */
export function watchServed(fingerprint: () => string, changed: () => Promise<void>, signal: AbortSignal, everyMs = WATCH_EVERY_MS): void {
  let last = fingerprint();
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    let now: string;
    try {
      now = fingerprint();
    } catch {
      return; // config.json half-written: next time
    }
    if (now === last) return;
    last = now;
    busy = true;
    changed().finally(() => (busy = false));
  }, everyMs);
  timer.unref?.();
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}
