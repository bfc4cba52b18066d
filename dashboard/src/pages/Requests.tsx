import type { FormEvent } from "react";
import { Link, useSearchParams } from "react-router";
import { OwnerApiRequestQuery } from "@svc/contract";
import type { z } from "zod";
import { api, call } from "../api/client";
import { DataTable } from "../components/DataTable";
import { LoadMore, NewerRows, useCursorPages } from "../components/CursorPages";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { Time } from "../components/Time";
import { formatDuration } from "../format/time";

type Query = z.infer<typeof OwnerApiRequestQuery>;
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;

/** The app's API requests made with its keys, newest first, kept up while shown; found by request id. */
export function Requests() {
  const { app, env } = useEnvParams();
  const [params, setParams] = useSearchParams();
  const filters = {
    outcome: (params.get("outcome") || "all") as Query["outcome"],
    method: (params.get("method") || undefined) as Query["method"],
    path: params.get("path") || undefined,
    requestId: params.get("requestId") || undefined,
    user: params.get("user") || undefined,
  };
  const requests = useCursorPages(["owner", app, env, "requests", filters], (page) => call(api.ownerListApiRequests({ params: { app, env }, query: { ...filters, ...page } })), { live: true });
  const filter = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const next = new URLSearchParams();
    for (const name of ["requestId", "user", "outcome", "method", "path"]) {
      const v = String(form.get(name) ?? "").trim();
      if (v && !(name === "outcome" && v === "all")) next.set(name, v);
    }
    setParams(next);
  };
  const rows = requests.data ?? [];
  return (
    <>
      <PageHeader title="API requests" />
      <p className="muted">
        Requests made with this environment's app keys, newest first: times to the second in your time zone (hover one for UTC), the path as sent but never its query, headers or body. Kept for the deployment's <code>REQUEST_LOG_RETENTION_DAYS</code> (14 days unless set). Paste an <code>x-request-id</code> from an error to find its request.
      </p>
      <form className="inline-form" onSubmit={filter} aria-label="Filter requests" key={params.toString()}>
        <label>
          Request id <input name="requestId" defaultValue={filters.requestId ?? ""} placeholder="req_…" autoComplete="off" spellCheck={false} />
        </label>
        <label>
          User <input name="user" defaultValue={filters.user ?? ""} autoComplete="off" />
        </label>
        <label>
          Outcome{" "}
          <select name="outcome" defaultValue={filters.outcome}>
            <option value="all">Any</option>
            <option value="succeeded">Succeeded</option>
            <option value="failed">Failed (4xx, 5xx)</option>
          </select>
        </label>
        <label>
          Method{" "}
          <select name="method" defaultValue={filters.method ?? ""}>
            <option value="">Any</option>
            {METHODS.map((m) => (
              <option key={m}>{m}</option>
            ))}
          </select>
        </label>
        <label>
          Path starts with <input name="path" defaultValue={filters.path ?? ""} placeholder="/v1/runs" />
        </label>
        <button type="submit">Filter</button>
      </form>
      {requests.isPending && <Loading label="Loading requests" />}
      <ErrorNotice error={requests.error} />
      {requests.data && rows.length === 0 && <p>No requests match{filters.requestId ? `: no request ${filters.requestId} in this environment within the log's retention` : ""}.</p>}
      <NewerRows pages={requests} what={["request", "requests"]} />
      {rows.length > 0 && (
        <DataTable
          caption="API requests"
          className="request-log"
          stacked
          rows={rows}
          rowKey={(r) => r.id}
          columns={[
            { label: "Time", className: "col-time", cell: (r) => <Time at={r.createdAt} style="short" /> },
            {
              label: "Request",
              className: "col-request",
              cell: (r) => (
                <>
                  <code className="request-line" title={`Route ${r.route}`}>
                    <span className="request-method">{r.method}</span> {r.path}
                  </code>
                  <span className="request-about">
                    <span className="visually-hidden">Request id </span>
                    <code>{r.requestId}</code>
                    <span className="request-key">
                      {" · key "}
                      {r.key.name ? <span title={r.key.display}>{r.key.name}</span> : <code>{r.key.display}</code>}
                    </span>
                  </span>
                </>
              ),
            },
            {
              label: "Answer",
              className: "col-answer",
              cell: (r) => (
                <span className={`state ${r.status >= 400 ? "state-failed" : "state-completed"}`}>
                  {r.status}
                  {r.errorCode ? ` ${r.errorCode}` : ""}
                </span>
              ),
            },
            { label: "Duration", numeric: true, className: "col-duration", cell: (r) => formatDuration(r.durationMs) },
            {
              label: "Run and user",
              className: "col-run",
              cell: (r) => (
                <>
                  {r.runId ? <Link to={`/apps/${encodeURIComponent(app)}/${env}/runs/${encodeURIComponent(r.runId)}`}>{r.runId}</Link> : null}
                  {r.user ? <Link to={`/apps/${encodeURIComponent(app)}/${env}/users/${encodeURIComponent(r.user)}`}>{r.user}</Link> : null}
                  {!r.runId && !r.user ? <span className="muted">—</span> : null}
                </>
              ),
            },
          ]}
        />
      )}
      <LoadMore pages={requests}>Load more requests</LoadMore>
    </>
  );
}
