import { formatClock, formatTimeSeconds } from "../format/time";

/**
 * A time to the second, in the browser's zone, as a `<time>` whose tooltip is the exact UTC instant (to the
 * millisecond, as the service's logs and the API write it). `short`: the year left out when it is this one's;
 * `clock`: the time of day only (a run's events, whose day the run's start gives).
 */
export function Time({ at, style = "full", className }: { at: string | null | undefined; style?: "full" | "short" | "clock"; className?: string }) {
  if (!at) return <span className={className}>—</span>;
  return (
    <time dateTime={at} title={`${at} (UTC)`} className={className}>
      {style === "clock" ? formatClock(at) : formatTimeSeconds(at, style)}
    </time>
  );
}
