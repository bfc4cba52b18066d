import type { FormEvent } from "react";
import { useInfiniteQuery } from "@tanstack/react-query";
import { Link, useSearchParams } from "react-router";
import type { z } from "zod";
import { RouteKind, RunStatus } from "@svc/contract";
import { api, call } from "../api/client";
import { DataTable } from "../components/DataTable";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { formatCount, formatTime } from "../format/time";

type Status = z.infer<typeof RunStatus>;
type Route = z.infer<typeof RouteKind>;

export function Runs() {
  const { app, env } = useEnvParams();
  const [params, setParams] = useSearchParams();
  const filters = { user: params.get("user") || undefined, status: (params.get("status") || undefined) as Status | undefined, route: (params.get("route") || undefined) as Route | undefined };
  const runs = useInfiniteQuery({
    queryKey: ["owner", app, env, "runs", filters],
    queryFn: ({ pageParam }) => call(api.ownerListRuns({ params: { app, env }, query: { ...filters, cursor: pageParam, limit: 50 } })),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (page) => (page.hasMore ? (page.nextCursor ?? undefined) : undefined),
  });
  const filter = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const next = new URLSearchParams();
    for (const name of ["user", "status", "route"]) {
      const v = String(form.get(name) ?? "").trim();
      if (v) next.set(name, v);
    }
    setParams(next);
  };
  const rows = runs.data?.pages.flatMap((p) => p.data) ?? [];
  return (
    <>
      <PageHeader title="Runs" />
      <form className="inline-form" onSubmit={filter} aria-label="Filter runs" key={params.toString()}>
        <label>
          User <input name="user" defaultValue={filters.user ?? ""} />
        </label>
        <label>
          Status{" "}
          <select name="status" defaultValue={filters.status ?? ""}>
            <option value="">Any</option>
            {RunStatus.options.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Route{" "}
          <select name="route" defaultValue={filters.route ?? ""}>
            <option value="">Any</option>
            {RouteKind.options.map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
        </label>
        <button type="submit">Filter</button>
      </form>
      {runs.isPending && <Loading label="Loading runs" />}
      <ErrorNotice error={runs.error} />
      {runs.data && rows.length === 0 && <p>No runs match.</p>}
      {rows.length > 0 && (
        <DataTable
          rows={rows}
          rowKey={(r) => r.id}
          columns={[
            { label: "Run", cell: (r) => <Link to={encodeURIComponent(r.id)}>{r.id}</Link> },
            { label: "User", cell: (r) => r.user },
            { label: "Status", cell: (r) => <span className={`state state-${r.status}`}>{r.status}</span> },
            { label: "Route", cell: (r) => r.route ?? "—" },
            { label: "Model", cell: (r) => r.model },
            {
              label: "Tokens in / out",
              numeric: true,
              cell: (r) => (
                <>
                  {formatCount(r.usage.inputTokens)} / {formatCount(r.usage.outputTokens)}
                </>
              ),
            },
            { label: "Started", cell: (r) => formatTime(r.createdAt) },
          ]}
        />
      )}
      {runs.hasNextPage && (
        <button type="button" onClick={() => runs.fetchNextPage()} disabled={runs.isFetchingNextPage}>
          Load more runs
        </button>
      )}
    </>
  );
}
