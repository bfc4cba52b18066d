import { useMemo, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { api, call } from "../api/client";
import { DayChart } from "../components/Chart";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { lastDays, RangePicker } from "../components/RangePicker";
import { formatMoney } from "../format/money";
import { formatCount, formatTime } from "../format/time";

export function Conversions() {
  const { app, env } = useEnvParams();
  const [range, setRange] = useState(() => lastDays(30));
  const conv = useQuery({ queryKey: ["owner", app, env, "conversions", range], queryFn: () => call(api.ownerConversions({ params: { app, env }, query: range })) });
  const c = conv.data;
  const count = useMemo(() => (v: number) => formatCount(v), []);
  const series = useMemo(
    () =>
      c && [
        { label: "Trials started", values: c.series.map((s) => s.trialsStarted) },
        { label: "Converted", values: c.series.map((s) => s.converted) },
        { label: "Cancelled", values: c.series.map((s) => s.cancelled) },
      ],
    [c],
  );
  const days = useMemo(() => c?.series.map((s) => s.day) ?? [], [c]);
  return (
    <>
      <PageHeader title="Conversions">
        <RangePicker value={range} onChange={setRange} />
      </PageHeader>
      {conv.isPending && <Loading label="Loading conversions" />}
      <ErrorNotice error={conv.error} />
      {c && series && (
        <>
          <DayChart title="Trials and conversions by day" days={days} series={series} format={count} />
          <section aria-labelledby="per-plan-title">
            <h2 id="per-plan-title">Per plan</h2>
            <div className="table-scroll" tabIndex={0}>
              <table>
                <thead>
                  <tr>
                    <th scope="col">Plan</th>
                    <th scope="col">Trials started</th>
                    <th scope="col">Converted</th>
                    <th scope="col">Cancelled</th>
                  </tr>
                </thead>
                <tbody>
                  {c.perPlan.map((p) => (
                    <tr key={p.plan.slug}>
                      <th scope="row">{p.plan.name}</th>
                      <td className="num">{formatCount(p.trialsStarted)}</td>
                      <td className="num">{formatCount(p.converted)}</td>
                      <td className="num">{formatCount(p.cancelled)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </section>
          <section aria-labelledby="payments-title">
            <h2 id="payments-title">Payments</h2>
            {c.payments.length === 0 ? (
              <p>No payments in this range.</p>
            ) : (
              <div className="table-scroll" tabIndex={0}>
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Paid</th>
                      <th scope="col">User</th>
                      <th scope="col">Plan</th>
                      <th scope="col">Amount</th>
                      <th scope="col">After a trial started</th>
                    </tr>
                  </thead>
                  <tbody>
                    {c.payments.map((p) => (
                      <tr key={p.id}>
                        <th scope="row">{formatTime(p.paidAt)}</th>
                        <td>
                          <Link to={`/apps/${encodeURIComponent(app)}/${env}/users/${encodeURIComponent(p.user)}`}>{p.user}</Link>
                        </td>
                        <td>{p.plan ?? "—"}</td>
                        <td className="num">{formatMoney(p.amountMicros, p.currency)}</td>
                        <td>{formatTime(p.trialStartedAt)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </section>
        </>
      )}
    </>
  );
}
