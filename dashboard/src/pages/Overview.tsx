import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { api, call } from "../api/client";
import { LIVE_INTERVAL_MS } from "../components/CursorPages";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { formatMoney } from "../format/money";
import { formatCount, formatTime } from "../format/time";

/** One figure with what it is and where to look closer. */
function Tile({ label, value, detail, to, warn = false }: { label: string; value: string; detail?: string; to: string; warn?: boolean }) {
  return (
    <div className={`tile${warn ? " tile-warn" : ""}`}>
      <dt>
        <Link to={to}>{label}</Link>
      </dt>
      <dd>
        <span className="tile-value">{value}</span>
        {detail && <span className="tile-detail">{detail}</span>}
      </dd>
    </div>
  );
}

/** The environment at a glance, kept up while shown: the dashboard's landing page. */
export function Overview() {
  const { app, env } = useEnvParams();
  const overview = useQuery({
    queryKey: ["owner", app, env, "overview"],
    queryFn: () => call(api.ownerOverview({ params: { app, env } })),
    refetchInterval: (q) => (q.state.error ? false : LIVE_INTERVAL_MS),
  });
  const o = overview.data;
  const base = `/apps/${encodeURIComponent(app)}/${env}`;
  return (
    <>
      <PageHeader title="Overview" />
      {overview.isPending && <Loading label="Loading the overview" />}
      <ErrorNotice error={overview.error} />
      {o && (
        <dl className="tiles" aria-label={`This environment today and in ${o.period}`}>
          <Tile label="Runs today" value={formatCount(o.runs.today)} detail={`${formatCount(o.runs.period)} this month; ${formatCount(o.previous.runs)} in ${o.previous.period}`} to={`${base}/runs`} />
          <Tile
            label="Failed today"
            value={formatCount(o.runs.failedToday)}
            detail={o.runs.live > 0 ? `${formatCount(o.runs.live)} live now` : "none live now"}
            to={`${base}/runs?status=failed`}
            warn={o.runs.failedToday > 0}
          />
          <Tile
            label="Handed back today"
            value={formatCount(o.runs.handedBackToday)}
            detail={`${formatCount(o.runs.handedBackPeriod)} this month; no machine could take them, so your app served them`}
            to={`${base}/runs?status=handed_back`}
          />
          <Tile
            label="Spend today"
            value={formatMoney(o.spend.todayMicros, o.spend.currency)}
            detail={`${formatMoney(o.spend.periodMicros, o.spend.currency)} this month; ${formatMoney(o.previous.spendMicros, o.spend.currency)} in ${o.previous.period}`}
            to={`${base}/usage`}
          />
          <Tile
            label="Paused now"
            value={formatCount(o.runs.paused)}
            detail="runs waiting on a plan limit or their budget"
            to={`${base}/runs?status=paused`}
            warn={o.runs.paused > 0}
          />
          <Tile label="Tokens this month" value={formatCount(o.tokens.period)} detail={`${formatCount(o.previous.tokens)} in ${o.previous.period}`} to={`${base}/usage`} />
          <Tile label="End users" value={formatCount(o.users.total)} detail={`${formatCount(o.users.activeThisPeriod)} with a run this month`} to={`${base}/users`} />
          <Tile label="Machines online" value={formatCount(o.machines.online)} detail={`of ${formatCount(o.machines.paired)} paired`} to={`${base}/users`} />
          <Tile
            label="API requests, 24 h"
            value={o.requests.logEnabled ? formatCount(o.requests.last24h) : "off"}
            detail={o.requests.logEnabled ? `${formatCount(o.requests.failedLast24h)} failed` : "REQUEST_LOG_RETENTION_DAYS is 0 on this deployment"}
            to={`${base}/requests${o.requests.failedLast24h > 0 ? "?outcome=failed" : ""}`}
            warn={o.requests.failedLast24h > 0}
          />
          <Tile
            label="Webhooks failed, 24 h"
            value={formatCount(o.webhooks.failedLast24h)}
            detail={`${formatCount(o.webhooks.retrying)} retrying; ${formatCount(o.webhooks.endpoints)} endpoint${o.webhooks.endpoints === 1 ? "" : "s"}`}
            to={`${base}/webhooks`}
            warn={o.webhooks.failedLast24h > 0}
          />
        </dl>
      )}
      {o && (
        <section aria-labelledby="failures-title">
          <h2 id="failures-title">Recent failures</h2>
          {o.recentFailures.length === 0 ? (
            <p>No run failed in the last 7 days.</p>
          ) : (
            <ul className="failures">
              {o.recentFailures.map((f) => (
                <li key={f.runId}>
                  <Link to={`${base}/runs/${encodeURIComponent(f.runId)}`}>{f.runId}</Link> of {f.user}: <strong>{f.code ?? "failed"}</strong>
                  {f.message ? ` (${f.message})` : ""} <time dateTime={f.at}>{formatTime(f.at)}</time>
                </li>
              ))}
            </ul>
          )}
        </section>
      )}
    </>
  );
}
