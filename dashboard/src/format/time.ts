const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export function formatTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : dateTime.format(d);
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
