import { useState, type FormEvent } from "react";
import { Link } from "react-router";
import { api, call } from "../api/client";
import { DataTable } from "../components/DataTable";
import { LoadMore, NewerRows, useCursorPages } from "../components/CursorPages";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { formatMoney } from "../format/money";
import { formatCount, formatTime } from "../format/time";

export function Users() {
  const { app, env } = useEnvParams();
  const [q, setQ] = useState("");
  const users = useCursorPages(["owner", app, env, "users", q], (page) => call(api.ownerListUsers({ params: { app, env }, query: { q: q || undefined, ...page } })), { live: true });
  const search = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    setQ(String(new FormData(e.currentTarget).get("q")).trim());
  };
  const rows = users.data ?? [];
  return (
    <>
      <PageHeader title="End users" />
      <form role="search" onSubmit={search} className="inline-form">
        <label htmlFor="user-search">Search by user id or email</label>
        <input id="user-search" name="q" type="search" defaultValue={q} />
        <button type="submit">Search</button>
      </form>
      {users.isPending && <Loading label="Loading users" />}
      <ErrorNotice error={users.error} />
      {users.data && rows.length === 0 && <p>No users{q ? ` match “${q}”` : " yet"}.</p>}
      <NewerRows pages={users} what={["user", "users"]} />
      {rows.length > 0 && (
        <DataTable
          rows={rows}
          rowKey={(u) => u.id}
          columns={[
            {
              label: "User",
              cell: (u) => (
                <>
                  <Link to={encodeURIComponent(u.id)}>{u.id}</Link>
                  {u.email && <div className="muted">{u.email}</div>}
                </>
              ),
            },
            {
              label: "Plan",
              cell: (u) => (
                <>
                  {u.plan?.name ?? "—"}
                  {u.subscriptionStatus && <div className="muted">{u.subscriptionStatus}</div>}
                </>
              ),
            },
            {
              label: "Allowance used",
              numeric: true,
              cell: (u) => (
                <>
                  {formatCount(u.allowance.used)} / {u.allowance.limit === null ? "unlimited" : formatCount(u.allowance.limit)} {u.allowance.unit}
                </>
              ),
            },
            { label: "Counted runs this period", numeric: true, cell: (u) => formatCount(u.runs) },
            { label: "Spend this period", numeric: true, cell: (u) => formatMoney(u.amountMicros, u.currency) },
            {
              label: "Machines online",
              numeric: true,
              cell: (u) => (
                <>
                  {u.online} of {u.machines}
                </>
              ),
            },
            { label: "Last run", cell: (u) => formatTime(u.lastRunAt) },
          ]}
        />
      )}
      {rows.length > 0 && <p className="muted">Counted runs are those counted against the plan: runs on <code>svc/echo</code> are free and not counted, so a user's last run may be newer than their count says.</p>}
      <LoadMore pages={users}>Load more users</LoadMore>
    </>
  );
}
