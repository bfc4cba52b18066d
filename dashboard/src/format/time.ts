const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const dateTimeSeconds = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const clock = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });
const dayAndClock = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit" });

const parsed = (iso: string) => {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? null : d;
};

/** A time to the minute, in the browser's zone: `Dec 6, 2026, 10:03 AM`. */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = parsed(iso);
  return d ? dateTime.format(d) : iso;
}

/**
 * A time to the second, where the order of things within a minute matters (the request log, a run and its
 * timeline): `Dec 6, 2026, 10:03:12 AM`. `short` drops the year when it is this year's (`Dec 6, 10:03:12 AM`),
 * for a column that should stay on one line.
 */
export function formatTimeSeconds(iso: string | null | undefined, style: "full" | "short" = "full"): string {
  if (!iso) return "—";
  const d = parsed(iso);
  if (!d) return iso;
  return style === "short" && d.getFullYear() === new Date().getFullYear() ? dayAndClock.format(d) : dateTimeSeconds.format(d);
}

/** The time of day to the second (`10:03:12 AM`): for a run's events, whose day the run's start says. */
export function formatClock(iso: string): string {
  const d = parsed(iso);
  return d ? clock.format(d) : iso;
}

/** Are two times on the same day, in the browser's zone? */
export function sameLocalDay(a: string, b: string): boolean {
  const x = parsed(a);
  const y = parsed(b);
  return x !== null && y !== null && x.toDateString() === y.toDateString();
}

/** How long from one time to another, in words a person reads at a glance: `350 ms`, `4.2 s`, `3 min 12 s`, `2 h 5 min`. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  const m = Math.round(s / 60);
  if (m < 48 * 60) return `${Math.floor(m / 60)} h ${m % 60} min`;
  return `${Math.round(m / 1440)} days`;
}

const count = new Intl.NumberFormat();
export const formatCount = (n: number) => count.format(n);

/** YYYY-MM-DD of a date, UTC (the service's days are UTC). */
export const utcDay = (d: Date) => d.toISOString().slice(0, 10);

/** Every UTC day from `from` to `to` (YYYY-MM-DD, inclusive): charts show days without usage as zero. */
export function daysBetween(from: string, to: string): string[] {
  const days: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`), end = Date.parse(`${to}T00:00:00Z`); t <= end && days.length < 1000; t += 86_400_000) days.push(utcDay(new Date(t)));
  return days;
}
