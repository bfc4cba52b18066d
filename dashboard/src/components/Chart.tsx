import { useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { DataTable } from "./DataTable";

export interface Series {
  label: string;
  values: number[];
}

const COLORS = ["#1f4fd1", "#c2410c", "#15803d", "#7e22ce", "#0e7490"];
const HALF_DAY_S = 43_200;

/** The fewest days a chart shows: one day of data is a bar among a week, not a block across the whole width. */
export const MIN_CHART_DAYS = 7;

/**
 * Which of a range's days a chart shows: from its first day with data, or MIN_CHART_DAYS before its end when
 * that is later, to its end (always kept: today, when the range ends today). Days before the first with data are
 * left out rather than drawn as a month of zeros; empty days after it stay, as the gaps they are. -1: every day
 * of the range is zero.
 */
export function firstShownDay(days: readonly string[], series: readonly Series[]): number {
  const first = days.findIndex((_d, i) => series.some((s) => (s.values[i] ?? 0) !== 0));
  return first === -1 ? -1 : Math.min(first, Math.max(0, days.length - MIN_CHART_DAYS));
}

const dayWords = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeZone: "UTC" });
const shortDay = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
/** The y axis's steps for counts: whole numbers only. */
const WHOLE_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 2.5e4, 5e4, 1e5, 2e5, 2.5e5, 5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9];
/** The room one day's label takes on the x axis. */
const LABEL_PX = 56;
const said = (day: string) => dayWords.format(new Date(`${day}T00:00:00Z`));

/**
 * A chart of values per UTC day (uPlot, bundled), and the same numbers as a table for screen readers and anyone
 * who wants them exactly. The days shown are `firstShownDay`'s, said under the title when the range starts
 * earlier; a range with nothing in it is said in words, not drawn. Each day's slot is a whole day wide with half a
 * day of room at either end, so the first and last days' bars (today's) are drawn whole. `bars` are stacked: a
 * day's bar is its total, each series its share of it, in the series' order from the bottom.
 */
export function DayChart({
  title,
  days,
  series,
  format,
  bars = false,
  whole = false,
}: {
  title: string;
  days: string[];
  series: Series[];
  format: (v: number) => string;
  bars?: boolean;
  /** Counts: the y axis is marked at whole numbers only (never 0.2 of a run). */
  whole?: boolean;
}) {
  const box = useRef<HTMLDivElement>(null);
  const start = firstShownDay(days, series);
  const shown = useMemo(
    () => (start === -1 ? null : { days: days.slice(start), series: series.map((s) => ({ label: s.label, values: s.values.slice(start) })) }),
    [days, series, start],
  );
  useEffect(() => {
    const el = box.current;
    if (!el || !shown) return;
    const xs = shown.days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
    const n = shown.series.length;
    // Stacked bars: series i drawn as the sum of series 0..i, the tallest first, so each shows its own share on top of the ones below it.
    const sums = shown.series.map((_s, i) => shown.days.map((_d, j) => shown.series.slice(0, i + 1).reduce((t, s) => t + (s.values[j] ?? 0), 0)));
    const order = bars ? shown.series.map((_s, i) => n - 1 - i) : shown.series.map((_s, i) => i);
    const data = order.map((i) =>
      bars ? sums[i].map((v, j) => ((shown.series[i].values[j] ?? 0) === 0 ? null : v)) : shown.series[i].values,
    );
    const plot = new uPlot(
      {
        width: Math.max(el.clientWidth, 280),
        height: 240,
        scales: {
          x: { time: true, range: () => [xs[0] - HALF_DAY_S, xs[xs.length - 1] + HALF_DAY_S] },
          y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
        },
        axes: [
          // One label a day, or every few days when they would crowd, counted back from the last day so that it (today) is always labelled.
          {
            splits: (u) => {
              const step = Math.max(1, Math.ceil((xs.length * LABEL_PX) / Math.max(u.bbox.width / devicePixelRatio, 1)));
              return xs.filter((_x, i) => (xs.length - 1 - i) % step === 0);
            },
            values: (_u, splits) => splits.map((t) => shortDay.format(new Date(t * 1000))),
          },
          { values: (_u, ticks) => ticks.map((t) => format(t)), size: 70, ...(whole ? { incrs: WHOLE_STEPS } : {}) },
        ],
        series: [
          { label: "Day", value: (_u: uPlot, v: number | null) => (v == null ? "—" : said(new Date(v * 1000).toISOString().slice(0, 10))) },
          ...order.map((i) => ({
            label: shown.series[i].label,
            stroke: COLORS[i % COLORS.length],
            fill: bars ? COLORS[i % COLORS.length] : undefined,
            width: bars ? 1 : 2,
            points: bars ? { show: false } : undefined,
            paths: bars ? uPlot.paths.bars!({ size: [0.6, 48, 2] }) : undefined,
            // The legend says a series' own value, not the stack's.
            value: (_u: uPlot, _v: number | null, _s: number, j: number | null) => (j == null ? "—" : format(shown.series[i].values[j] ?? 0)),
          })),
        ],
      },
      [xs, ...data],
      el,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(el.clientWidth, 280), height: 240 }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [shown, format, bars, whole]);

  return (
    <figure className="chart" data-first-day={shown?.days[0]} data-days={shown?.days.length ?? 0}>
      <figcaption>{title}</figcaption>
      {days.length === 0 ? (
        <p className="muted">Nothing in this range.</p>
      ) : !shown ? (
        <p className="muted chart-note">
          Nothing from {said(days[0])} to {said(days[days.length - 1])}.
        </p>
      ) : (
        <>
          {start > 0 && (
            <p className="muted chart-note">
              Nothing from {said(days[0])} to {said(days[start - 1])}: the chart starts on {said(shown.days[0])}.
            </p>
          )}
          <div ref={box} aria-hidden="true" />
          <details>
            <summary>{title}: as a table</summary>
            <DataTable
              caption={title}
              rows={shown.days}
              rowKey={(d) => d}
              columns={[{ label: "Day", cell: (d) => d }, ...shown.series.map((s) => ({ label: s.label, numeric: true, cell: (_d: string, i: number) => format(s.values[i] ?? 0) }))]}
            />
          </details>
        </>
      )}
    </figure>
  );
}
