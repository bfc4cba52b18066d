import { useMemo, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import type { z } from "zod";
import type { UsageSummary } from "@svc/contract";
import { api, call } from "../api/client";
import { DayChart } from "../components/Chart";
import { DataTable } from "../components/DataTable";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { RangePicker, type Range } from "../components/RangePicker";
import { formatMoney } from "../format/money";
import { daysBetween, formatCount } from "../format/time";

const COST_CLASS_LABELS: Record<string, string> = {
  user_hardware: "User's hardware",
  user_subscription: "User's subscription",
  app_served: "Served by the app",
  free: "Free",
};

type DayTotals = z.infer<typeof UsageSummary>["days"][number];

export function Usage() {
  const { app, env } = useEnvParams();
  // No range chosen: the service's default, the 30 UTC days ending on its today (the answer says which).
  const [chosen, setRange] = useState<Range | null>(null);
  const summary = useQuery({ queryKey: ["owner", app, env, "usage", chosen], queryFn: () => call(api.ownerUsageSummary({ params: { app, env }, query: chosen ?? {} })) });
  const s = summary.data;
  const range = chosen ?? (s ? { from: s.from, to: s.to } : null);
  const exportCsv = useQuery({ queryKey: ["owner", app, env, "usage-export", range], queryFn: () => call(api.ownerUsageExport({ params: { app, env }, query: range ?? {} })), enabled: false });

  const money = useMemo(() => (v: number) => formatMoney(Math.round(v), s?.currency ?? "usd"), [s?.currency]);
  const count = useMemo(() => (v: number) => formatCount(v), []);
  const charts = useMemo(() => {
    if (!s) return null;
    const days = daysBetween(s.from, s.to);
    const classes = [...new Set(s.days.map((d) => d.costClass))];
    const per = (pick: (t: DayTotals) => number) =>
      classes.map((c) => ({ label: COST_CLASS_LABELS[c] ?? c, values: days.map((day) => s.days.filter((d) => d.day === day && d.costClass === c).reduce((n, d) => n + pick(d), 0)) }));
    return {
      days,
      spend: per((d) => d.amountMicros),
      runs: per((d) => d.runs),
      tokens: [
        { label: "Input tokens", values: days.map((day) => s.days.filter((d) => d.day === day).reduce((n, d) => n + d.inputTokens + d.cacheReadTokens + d.cacheWriteTokens, 0)) },
        { label: "Output tokens", values: days.map((day) => s.days.filter((d) => d.day === day).reduce((n, d) => n + d.outputTokens, 0)) },
      ],
    };
  }, [s]);

  const download = async () => {
    const { data } = await exportCsv.refetch();
    if (typeof data !== "string" || !range) return;
    const url = URL.createObjectURL(new Blob([data], { type: "text/csv" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = `usage-${app}-${env}-${range.from}-${range.to}.csv`;
    a.click();
    URL.revokeObjectURL(url);
  };

  return (
    <>
      <PageHeader title="Usage">
        {range && <RangePicker key={`${range.from}/${range.to}`} value={range} onChange={setRange} />}
        <button type="button" onClick={download} disabled={exportCsv.isFetching || !range}>
          Export CSV
        </button>
      </PageHeader>
      <ErrorNotice error={summary.error ?? exportCsv.error} />
      {summary.isPending && <Loading label="Loading usage" />}
      {s && charts && (
        <>
          <dl className="totals">
            <div>
              <dt>Spend</dt>
              <dd>{formatMoney(s.totals.amountMicros, s.currency)}</dd>
            </div>
            <div>
              <dt>Runs</dt>
              <dd>{formatCount(s.totals.runs)}</dd>
            </div>
            <div>
              <dt>Input tokens</dt>
              <dd>{formatCount(s.totals.inputTokens)}</dd>
            </div>
            <div>
              <dt>Output tokens</dt>
              <dd>{formatCount(s.totals.outputTokens)}</dd>
            </div>
          </dl>
          <DayChart title="Spend by day and cost class" days={charts.days} series={charts.spend} format={money} bars />
          <DayChart title="Runs by day and cost class" days={charts.days} series={charts.runs} format={count} bars whole />
          <DayChart title="Tokens by day" days={charts.days} series={charts.tokens} format={count} bars whole />
          <section aria-labelledby="by-class-title">
            <h2 id="by-class-title">By cost class</h2>
            <DataTable
              rows={s.byCostClass}
              rowKey={(c) => c.costClass}
              columns={[
                { label: "Cost class", cell: (c) => COST_CLASS_LABELS[c.costClass] ?? c.costClass },
                { label: "Runs", numeric: true, cell: (c) => formatCount(c.runs) },
                { label: "Input tokens", numeric: true, cell: (c) => formatCount(c.inputTokens) },
                { label: "Output tokens", numeric: true, cell: (c) => formatCount(c.outputTokens) },
                { label: "Spend", numeric: true, cell: (c) => formatMoney(c.amountMicros, s.currency) },
              ]}
            />
          </section>
          <section aria-labelledby="top-users-title">
            <h2 id="top-users-title">Top users</h2>
            <DataTable
              rows={s.topUsers}
              rowKey={(u) => u.user}
              columns={[
                { label: "User", cell: (u) => <Link to={`/apps/${encodeURIComponent(app)}/${env}/users/${encodeURIComponent(u.user)}`}>{u.user}</Link> },
                { label: "Runs", numeric: true, cell: (u) => formatCount(u.runs) },
                { label: "Tokens", numeric: true, cell: (u) => formatCount(u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens) },
                { label: "Spend", numeric: true, cell: (u) => formatMoney(u.amountMicros, s.currency) },
              ]}
            />
          </section>
        </>
      )}
    </>
  );
}
