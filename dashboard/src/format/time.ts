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
