import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { DataTable } from "./DataTable";

export interface Series {
  label: string;
  values: number[];
}

const COLORS = ["#1f4fd1", "#c2410c", "#15803d", "#7e22ce", "#0e7490"];

/**
 * A chart of values per day (uPlot, bundled), and the same numbers as a table for
 * screen readers and anyone who wants them exactly.
 */
export function DayChart({ title, days, series, format, bars = false }: { title: string; days: string[]; series: Series[]; format: (v: number) => string; bars?: boolean }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el || days.length === 0) return;
    const xs = days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
    const allZero = series.every((s) => s.values.every((v) => !v));
    const plot = new uPlot(
      {
        width: Math.max(el.clientWidth, 280),
        height: 240,
        // Nothing to show yet (all zero): the axis runs 0 to 1 and is labelled at 0 only, not in fractions of a cent.
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
        axes: [{}, { values: (_u, ticks) => ticks.map((t) => (allZero && t !== 0 ? "" : format(t))), size: 70 }],
        series: [
          { label: "Day" },
          ...series.map((s, i) => ({
            label: s.label,
            stroke: COLORS[i % COLORS.length],
            fill: bars ? `${COLORS[i % COLORS.length]}99` : undefined,
            width: 2,
            paths: bars ? uPlot.paths.bars!({ size: [0.6, 40] }) : undefined,
            value: (_u: uPlot, v: number | null) => (v == null ? "—" : format(v)),
          })),
        ],
      },
      [xs, ...series.map((s) => s.values)],
      el,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(el.clientWidth, 280), height: 240 }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [days, series, format, bars]);

  return (
    <figure className="chart">
      <figcaption>{title}</figcaption>
      {days.length === 0 ? (
        <p className="muted">Nothing in this range.</p>
      ) : (
        <>
          <div ref={box} aria-hidden="true" />
          <details>
            <summary>{title}: as a table</summary>
            <DataTable
              caption={title}
              rows={days}
              rowKey={(d) => d}
              columns={[{ label: "Day", cell: (d) => d }, ...series.map((s) => ({ label: s.label, numeric: true, cell: (_d: string, i: number) => format(s.values[i] ?? 0) }))]}
            />
          </details>
        </>
      )}
    </figure>
  );
}
