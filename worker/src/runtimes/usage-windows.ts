import type { UsageWindow } from "@svc/contract";

/**
 * Subscription usage windows as the agent CLIs report them, in one shape per
 * runtime (`UsageWindow`: `window`, `status`, `usedPercent?`, `resetsAt?`), for the
 * service to show and to route around (`runtime_limits`). Parsed from what each
 * CLI emits, never from the model API's headers directly (RUNTIMES.md section D).
 */

/** Claude Code's `rateLimitType` → our window name. */
const CLAUDE_WINDOWS: Record<string, string> = {
  five_hour: "5h",
  seven_day: "7d",
  seven_day_opus: "7d_opus",
  seven_day_sonnet: "7d_sonnet",
  seven_day_overage_included: "7d_overage",
  overage: "overage",
};

/** A reset time as a CLI says it (epoch seconds; milliseconds tolerated) → ISO, or undefined. */
function isoOf(t: unknown): string | undefined {
  if (typeof t !== "number" || !Number.isFinite(t) || t <= 0) return undefined;
  const ms = t > 1e12 ? t : t * 1000;
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

const percent = (n: number) => Math.min(100, Math.max(0, Math.round(n * 10) / 10));

/**
 * Claude Code's `rate_limit_event` (`rate_limit_info`: `status` allowed | allowed_warning |
 * rejected, `resetsAt` in epoch seconds, `rateLimitType`, `utilization` 0..1 past a warning
 * threshold only) → one window. Null when it names no window we know how to say.
 */
export function claudeWindow(info: unknown): UsageWindow | null {
  if (!info || typeof info !== "object") return null;
  const i = info as Record<string, unknown>;
  const type = typeof i.rateLimitType === "string" ? i.rateLimitType : "";
  const window = CLAUDE_WINDOWS[type] ?? (/^[a-z0-9_]{1,32}$/.test(type) ? type : null);
  if (!window) return null;
  const status = i.status === "rejected" ? "rejected" : i.status === "allowed_warning" ? "warning" : i.status === "allowed" ? "allowed" : null;
  if (!status) return null;
  const resetsAt = isoOf(i.resetsAt);
  const u = typeof i.utilization === "number" && Number.isFinite(i.utilization) ? percent(i.utilization * 100) : undefined;
  return { window, status, ...(u !== undefined ? { usedPercent: u } : {}), ...(resetsAt ? { resetsAt } : {}) };
}

/** A window length in minutes as a short name: 300 → `5h`, 10080 → `7d`, else `<minutes>m`. */
function windowName(mins: number): string {
  if (mins > 0 && mins % 1440 === 0) return `${mins / 1440}d`;
  if (mins > 0 && mins % 60 === 0) return `${mins / 60}h`;
  return `${mins}m`;
}

/**
 * Codex app-server's rate limit snapshot (`account/rateLimits/updated`'s `rateLimits`,
 * `account/rateLimits/read`'s): `primary` and `secondary`, each `{usedPercent,
 * windowDurationMins, resetsAt}` (epoch seconds), and `rateLimitReachedType` once a
 * limit is hit. A window at 100 % (or the snapshot saying a limit is reached, for a
 * window at 100 %) is `rejected`; past 90 % `warning`. Updates may be sparse: a window
 * not in this one is not in the answer (the caller merges).
 */
export function codexWindows(snapshot: unknown): UsageWindow[] {
  if (!snapshot || typeof snapshot !== "object") return [];
  const s = snapshot as Record<string, unknown>;
  const out: UsageWindow[] = [];
  for (const key of ["primary", "secondary"] as const) {
    const w = s[key] as Record<string, unknown> | null | undefined;
    if (!w || typeof w !== "object" || typeof w.usedPercent !== "number" || !Number.isFinite(w.usedPercent)) continue;
    const mins = typeof w.windowDurationMins === "number" && w.windowDurationMins > 0 ? Math.round(w.windowDurationMins) : null;
    const used = percent(w.usedPercent);
    const resetsAt = isoOf(w.resetsAt);
    out.push({ window: mins ? windowName(mins) : key, status: used >= 100 ? "rejected" : used >= 90 ? "warning" : "allowed", usedPercent: used, ...(resetsAt ? { resetsAt } : {}) });
  }
  return out;
}

/** The windows known for one runtime, merged from the CLI's reports (Claude reports one window at a time; Codex's updates may be sparse). */
export class WindowBook {
  private readonly windows = new Map<string, UsageWindow>();

  /** Takes in reported windows; says whether anything changed (a window gone past its reset is dropped first). */
  merge(reported: UsageWindow[], now = Date.now()): boolean {
    let changed = false;
    for (const [name, w] of this.windows) if (w.resetsAt && Date.parse(w.resetsAt) <= now) (this.windows.delete(name), (changed = true));
    for (const w of reported) {
      const old = this.windows.get(w.window);
      if (old && JSON.stringify(old) === JSON.stringify(w)) continue;
      this.windows.set(w.window, w);
      changed = true;
    }
    return changed;
  }

  list(): UsageWindow[] {
    return [...this.windows.values()].slice(0, 8);
  }

  /** The spent window resetting last, if any. */
  spent(): UsageWindow | null {
    let last: UsageWindow | null = null;
    for (const w of this.windows.values()) if (w.status === "rejected" && (!last || (w.resetsAt ?? "") > (last.resetsAt ?? ""))) last = w;
    return last;
  }
}

/** Words for a window: `5h` → "5-hour window". */
export function windowWords(window: string): string {
  const [len, rest] = [window.replace(/_.*$/, ""), window.includes("_") ? window.slice(window.indexOf("_") + 1) : ""];
  const m = /^(\d+)([hdm])$/.exec(len);
  const span = m ? `${m[1]}-${m[2] === "h" ? "hour" : m[2] === "d" ? "day" : "minute"}` : len;
  return window === "overage" ? "overage allowance" : `${span}${rest ? ` ${rest}` : ""} window`;
}

/** The message of a job cut off by a spent window: which, and when it resets. */
export function spentMessage(cli: string, w: UsageWindow | null, said?: string): string {
  const which = w ? `its subscription's ${windowWords(w.window)}` : "its subscription's usage window";
  const when = w?.resetsAt ? `; it resets at ${w.resetsAt}` : "";
  return `${cli} has used ${which}${when}.${said ? ` ${cli} said: ${said.slice(0, 500)}` : ""}`;
}
