import { Readable } from "node:stream";
import type { z } from "zod";
import { stringify } from "csv-stringify";
import type { RangeQuery, UsageSummary } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import { ApiError } from "../errors.js";
import { micros } from "./money.js";
import type { CostClassValue } from "./metering.js";
import { USAGE_ROW_COLUMNS, usageRowView, type UsageRowRecord } from "./usage.js";

const DAY_MS = 86_400_000;
/** The longest range one read covers: a year and a day (a leap year, both ends included). */
export const MAX_RANGE_DAYS = 367;

/** A range of whole UTC days: `from` 00:00 up to the day after `to`, 00:00. */
export interface DayRange {
  from: string;
  to: string;
  start: Date;
  end: Date;
}

/** The days asked for (default: the 30 days ending today, UTC), checked: `from` not after `to`, at most a year long. */
export function dayRange(q: z.infer<typeof RangeQuery>, now: Date): DayRange {
  const to = q.to ?? now.toISOString().slice(0, 10);
  const end = new Date(Date.parse(`${to}T00:00:00Z`) + DAY_MS);
  const from = q.from ?? new Date(end.getTime() - 30 * DAY_MS).toISOString().slice(0, 10);
  const start = new Date(`${from}T00:00:00Z`);
  // A day like 2026-02-31 passes the pattern; Date rolls it over, which is caught here.
  for (const [name, day] of [["from", from], ["to", to]] as const) {
    if (new Date(`${day}T00:00:00Z`).toISOString().slice(0, 10) !== day) throw new ApiError("invalid_request", `Invalid query field \`${name}\`: ${day} is not a day of the calendar.`, { param: name });
  }
  if (start >= end) throw new ApiError("invalid_request", "Invalid query field `from`: it is after `to`.", { param: "from" });
  if (end.getTime() - start.getTime() > MAX_RANGE_DAYS * DAY_MS) throw new ApiError("invalid_request", `A range covers at most ${MAX_RANGE_DAYS} days.`, { param: "from" });
  return { from, to, start, end };
}

/** The currency the environment's amounts are shown in: its default plan's, else `usd`. */
export async function environmentCurrency(db: Database, tenant: Tenant): Promise<string> {
  const rows = await db.query<{ currency: string }>(
    `SELECT currency FROM plans WHERE app_id = $1 AND environment = $2::"Environment" AND is_default AND archived_at IS NULL LIMIT 1`,
    [tenant.appId, tenant.environment],
  );
  return rows[0]?.currency ?? "usd";
}

type Sums = { runs: string | number; input: string | number | null; output: string | number | null; cache_read: string | number | null; cache_write: string | number | null; amount: string | number | null };
type Totals = z.infer<typeof UsageSummary>["totals"];

/** The sums every group of the summary is made of: `runs`, the runs with ledger rows in the group (`svc/echo` answers too, which the allowance does not count). */
const SUMS = `count(DISTINCT u.run_id) AS runs, sum(u.input_tokens) AS input, sum(u.output_tokens) AS output,
  sum(u.cache_read_tokens) AS cache_read, sum(u.cache_write_tokens) AS cache_write, sum(u.amount_micros) AS amount`;

function totals(r: Sums): Totals {
  return {
    runs: micros(r.runs),
    inputTokens: micros(r.input),
    outputTokens: micros(r.output),
    cacheReadTokens: micros(r.cache_read),
    cacheWriteTokens: micros(r.cache_write),
    amountMicros: micros(r.amount),
  };
}

function add(a: Totals, b: Totals): Totals {
  return {
    runs: a.runs + b.runs,
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
    amountMicros: a.amountMicros + b.amountMicros,
  };
}

const ZERO: Totals = { runs: 0, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, amountMicros: 0 };

/**
 * The dashboard's usage page: the ledger's rows of a range of days (by when
 * they were written, UTC) summed per day and cost class, per cost class, in
 * all, and for the ten users with the most spend (then runs).
 */
export async function usageSummary(db: Database, tenant: Tenant, range: DayRange): Promise<z.infer<typeof UsageSummary>> {
  const params = [tenant.appId, tenant.environment, range.start, range.end];
  const where = `u.app_id = $1 AND u.environment = $2::"Environment" AND u.created_at >= $3 AND u.created_at < $4`;
  const [currency, days, top] = await Promise.all([
    environmentCurrency(db, tenant),
    db.query<Sums & { day: string; cost_class: CostClassValue }>(
      `SELECT to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, u.cost_class::text AS cost_class, ${SUMS}
         FROM usage_rows u WHERE ${where} GROUP BY 1, 2 ORDER BY 1, 2`,
      params,
    ),
    db.query<Sums & { external_id: string }>(
      `SELECT e.external_id, ${SUMS} FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id
        WHERE ${where} GROUP BY e.external_id
        ORDER BY sum(u.amount_micros) DESC, count(DISTINCT u.run_id) DESC, e.external_id LIMIT 10`,
      params,
    ),
  ]);
  const dayRows = days.map((r) => ({ day: r.day, costClass: r.cost_class, ...totals(r) }));
  const byClass = new Map<(typeof dayRows)[number]["costClass"], Totals>();
  for (const { day: _day, costClass, ...t } of dayRows) byClass.set(costClass, add(byClass.get(costClass) ?? ZERO, t));
  return {
    from: range.from,
    to: range.to,
    currency,
    days: dayRows,
    byCostClass: [...byClass].sort(([a], [b]) => a.localeCompare(b)).map(([costClass, t]) => ({ costClass, ...t })),
    totals: [...byClass.values()].reduce(add, ZERO),
    topUsers: top.map((r) => ({ user: r.external_id, ...totals(r) })),
  };
}

export const USAGE_CSV_COLUMNS = [
  "id",
  "created_at",
  "user",
  "run_id",
  "cost_class",
  "kind",
  "input_tokens",
  "output_tokens",
  "cache_read_tokens",
  "cache_write_tokens",
  "amount_micros",
  "currency",
  "period",
] as const;

/** Rows read per query while exporting: the export streams, never holding the whole range. */
const EXPORT_PAGE = 1000;

/**
 * Every ledger row of the range as CSV, oldest first (by when written, then id),
 * with a header row; amounts in integer micros of the environment's currency.
 * Read in pages keyed on (created_at, id) and streamed out. Cells that a
 * spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, CR first) are
 * prefixed with `'` (csv-stringify's `escape_formulas`): user ids are the app's.
 */
export function usageCsv(db: Database, tenant: Tenant, range: DayRange): Readable {
  async function* rows() {
    const currency = await environmentCurrency(db, tenant);
    let after: { at: Date; id: string } | null = null;
    for (;;) {
      const page: UsageRowRecord[] = await db.query<UsageRowRecord>(
        `SELECT ${USAGE_ROW_COLUMNS} FROM usage_rows u JOIN end_users e ON e.id = u.end_user_id
          WHERE u.app_id = $1 AND u.environment = $2::"Environment" AND u.created_at >= $3 AND u.created_at < $4
            AND ($5::timestamptz IS NULL OR (u.created_at, u.id) > ($5::timestamptz, $6::bigint))
          ORDER BY u.created_at, u.id LIMIT ${EXPORT_PAGE}`,
        [tenant.appId, tenant.environment, range.start, range.end, after?.at ?? null, after?.id ?? null],
      );
      for (const r of page) {
        const v = usageRowView(r);
        yield [v.id, v.createdAt, v.user, v.runId ?? "", v.costClass, v.kind, v.inputTokens, v.outputTokens, v.cacheReadTokens, v.cacheWriteTokens, v.amountMicros, currency, v.period];
      }
      if (page.length < EXPORT_PAGE) return;
      const last = page[page.length - 1];
      after = { at: new Date(last.created_at), id: String(last.id) };
    }
  }
  const out = stringify({ header: true, columns: [...USAGE_CSV_COLUMNS], escape_formulas: true, record_delimiter: "\r\n" });
  const source = Readable.from(rows());
  source.on("error", (err) => out.destroy(err));
  return source.pipe(out);
}
