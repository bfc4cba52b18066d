import { useMemo, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import type { z } from "zod";
import type { Conversions as ConversionsAnswer } from "@svc/contract";
import { api, call } from "../api/client";
import { DayChart } from "../components/Chart";
import { DataTable } from "../components/DataTable";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { RangePicker, type Range } from "../components/RangePicker";
import { formatMoney } from "../format/money";
import { daysBetween, formatCount, formatTime } from "../format/time";

type DayCounts = z.infer<typeof ConversionsAnswer>["series"][number];

export function Conversions() {
  const { app, env } = useEnvParams();
  // No range chosen: the service's default, the 30 UTC days ending on its today.
  const [chosen, setRange] = useState<Range | null>(null);
  const conv = useQuery({ queryKey: ["owner", app, env, "conversions", chosen], queryFn: () => call(api.ownerConversions({ params: { app, env }, query: chosen ?? {} })) });
  const c = conv.data;
  const range = chosen ?? (c ? { from: c.from, to: c.to } : null);
  const count = useMemo(() => (v: number) => formatCount(v), []);
  // The service lists only the days with a change: every day of the range is charted, a day without one as zero.
  const days = useMemo(() => (c ? daysBetween(c.from, c.to) : []), [c]);
  const series = useMemo(() => {
    if (!c) return null;
    const on = new Map(c.series.map((s) => [s.day, s]));
    const per = (pick: (s: DayCounts) => number) => days.map((d) => (on.has(d) ? pick(on.get(d)!) : 0));
    return [
      { label: "Trials started", values: per((s) => s.trialsStarted) },
      { label: "Converted", values: per((s) => s.converted) },
      { label: "Cancelled", values: per((s) => s.cancelled) },
    ];
  }, [c, days]);
  return (
    <>
      <PageHeader title="Conversions">
        {range && <RangePicker key={`${range.from}/${range.to}`} value={range} onChange={setRange} />}
      </PageHeader>
      {conv.isPending && <Loading label="Loading conversions" />}
      <ErrorNotice error={conv.error} />
      {c && series && (
        <>
          <DayChart title="Trials and conversions by day" days={days} series={series} format={count} whole />
          <section aria-labelledby="per-plan-title">
            <h2 id="per-plan-title">Per plan</h2>
            <DataTable
              rows={c.perPlan}
              rowKey={(p) => p.plan.slug}
              columns={[
                { label: "Plan", cell: (p) => p.plan.name },
                { label: "Trials started", numeric: true, cell: (p) => formatCount(p.trialsStarted) },
                { label: "Converted", numeric: true, cell: (p) => formatCount(p.converted) },
                { label: "Cancelled", numeric: true, cell: (p) => formatCount(p.cancelled) },
              ]}
            />
          </section>
          <section aria-labelledby="signals-title">
            <h2 id="signals-title">After a pause or a threshold</h2>
            <dl className="tiles">
              <div className="tile">
                <dt>Runs paused at a limit</dt>
                <dd>
                  <span className="tile-value" data-tile="pauses">{formatCount(c.signals.pauses)}</span>
                </dd>
              </div>
              <div className="tile">
                <dt>Thresholds reached</dt>
                <dd>
                  <span className="tile-value" data-tile="thresholds">{formatCount(c.signals.thresholds)}</span>
                </dd>
              </div>
              <div className="tile">
                <dt>Upgraded within 7 days</dt>
                <dd>
                  <span className="tile-value" data-tile="upgraded">{formatCount(c.signals.upgraded)}</span>
                </dd>
              </div>
            </dl>
            {c.signals.recent.length === 0 ? (
              <p>No run paused and no threshold reached in this range.</p>
            ) : (
              <DataTable
                rows={c.signals.recent}
                rowKey={(x) => `${x.at}-${x.user}-${x.kind}-${x.detail}`}
                columns={[
                  { label: "When", cell: (x) => formatTime(x.at) },
                  { label: "User", cell: (x) => <Link to={`/apps/${encodeURIComponent(app)}/${env}/users/${encodeURIComponent(x.user)}`}>{x.user}</Link> },
                  { label: "What", cell: (x) => (x.kind === "paused" ? `Run paused (${x.detail})` : `Reached ${x.detail}`) },
                  { label: "Run", cell: (x) => (x.runId ? <Link to={`/apps/${encodeURIComponent(app)}/${env}/runs/${encodeURIComponent(x.runId)}`}>{x.runId}</Link> : "—") },
                  { label: "Upgraded", cell: (x) => (x.upgradedTo ? `${x.upgradedTo}, ${formatTime(x.upgradedAt!)}` : "—") },
                ]}
              />
            )}
          </section>
          <section aria-labelledby="payments-title">
            <h2 id="payments-title">Payments</h2>
            {c.payments.length === 0 ? (
              <p>No payments in this range.</p>
            ) : (
              <DataTable
                rows={c.payments}
                rowKey={(p) => p.id}
                columns={[
                  { label: "Paid", cell: (p) => formatTime(p.paidAt) },
                  { label: "User", cell: (p) => <Link to={`/apps/${encodeURIComponent(app)}/${env}/users/${encodeURIComponent(p.user)}`}>{p.user}</Link> },
                  { label: "Plan", cell: (p) => p.plan ?? "—" },
                  { label: "Amount", numeric: true, cell: (p) => formatMoney(p.amountMicros, p.currency) },
                  { label: "After a trial started", cell: (p) => formatTime(p.trialStartedAt) },
                ]}
              />
            )}
          </section>
        </>
      )}
    </>
  );
}
