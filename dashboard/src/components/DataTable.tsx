import type { Key, ReactNode } from "react";

/** One column: its header, and its cell for a row. */
export interface Column<T> {
  label: ReactNode;
  cell: (row: T, index: number) => ReactNode;
  /** Figures, aligned right (the `num` class). */
  numeric?: boolean;
  /** A cell of buttons (the `actions` class). */
  actions?: boolean;
  /** A class of its cells (its `th` or `td`), for a table laid out for its content. */
  className?: string;
}

/**
 * Every table in the dashboard: scrollable on its own and reachable by keyboard (`table-scroll`,
 * `tabIndex`), column headers `scope="col"`, and the first column's cell as the row's header
 * (`scope="row"`). The caption, when given, is for screen readers only unless `showCaption`.
 *
 * `className` names the table for its own layout. `stacked`: on a phone, each row is a block (its
 * cells wrap, each named by its column's label) instead of a table wider than the screen.
 */
export function DataTable<T>({
  columns,
  rows,
  rowKey,
  caption,
  showCaption = false,
  className,
  stacked = false,
}: {
  columns: readonly [Column<T>, ...Column<T>[]];
  rows: readonly T[];
  rowKey: (row: T, index: number) => Key;
  caption?: ReactNode;
  showCaption?: boolean;
  className?: string;
  stacked?: boolean;
}) {
  const [head, ...rest] = columns;
  const classes = [className, stacked ? "table-stacked" : null].filter(Boolean).join(" ") || undefined;
  const label = (c: Column<T>) => (typeof c.label === "string" ? c.label : undefined);
  const cellClass = (c: Column<T>) => [c.numeric ? "num" : c.actions ? "actions" : null, c.className].filter(Boolean).join(" ") || undefined;
  return (
    <div className={stacked ? "table-scroll table-scroll-stacked" : "table-scroll"} tabIndex={0}>
      <table className={classes}>
        {caption !== undefined && <caption className={showCaption ? undefined : "visually-hidden"}>{caption}</caption>}
        <thead>
          <tr>
            {columns.map((c, i) => (
              <th scope="col" key={i} className={c.className}>
                {c.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row, i) => (
            <tr key={rowKey(row, i)}>
              <th scope="row" className={head.className} data-label={stacked ? label(head) : undefined}>
                {head.cell(row, i)}
              </th>
              {rest.map((c, j) => (
                <td key={j} className={cellClass(c)} data-label={stacked ? label(c) : undefined}>
                  {c.cell(row, i)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
