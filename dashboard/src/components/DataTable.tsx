import type { Key, ReactNode } from "react";

/** One column: its header, and its cell for a row. */
export interface Column<T> {
  label: ReactNode;
  cell: (row: T, index: number) => ReactNode;
  /** Figures, aligned right (the `num` class). */
  numeric?: boolean;
  /** A cell of buttons (the `actions` class). */
  actions?: boolean;
}

/**
 * Every table in the dashboard: scrollable on its own and reachable by keyboard (`table-scroll`,
 * `tabIndex`), column headers `scope="col"`, and the first column's cell as the row's header
 * (`scope="row"`). The caption, when given, is for screen readers only unless `showCaption`.
 */
export function DataTable<T>({
  columns,
  rows,
  rowKey,
  caption,
  showCaption = false,
}: {
  columns: readonly [Column<T>, ...Column<T>[]];
  rows: readonly T[];
  rowKey: (row: T, index: number) => Key;
  caption?: ReactNode;
  showCaption?: boolean;
}) {
  const [head, ...rest] = columns;
  return (
    <div className="table-scroll" tabIndex={0}>
      <table>
        {caption !== undefined && <caption className={showCaption ? undefined : "visually-hidden"}>{caption}</caption>}
        <thead>
          <tr>
            {columns.map((c, i) => (
              <th scope="col" key={i}>
                {c.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row, i) => (
            <tr key={rowKey(row, i)}>
              <th scope="row">{head.cell(row, i)}</th>
              {rest.map((c, j) => (
                <td key={j} className={c.numeric ? "num" : c.actions ? "actions" : undefined}>
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
