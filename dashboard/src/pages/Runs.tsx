import { useState, type FormEvent } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { Link, useNavigate, useSearchParams } from "react-router";
import type { z } from "zod";
import { RouteKind, RunStatus } from "@svc/contract";
import { api, ApiFailure, call } from "../api/client";
import { routeLabel, runIdOf, runQuery } from "../api/runs";
import { DataTable } from "../components/DataTable";
import { LoadMore, NewerRows, useCursorPages } from "../components/CursorPages";
import type { Env } from "../components/EnvScope";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { Time } from "../components/Time";
import { formatCount } from "../format/time";

/** Which endpoint started a run, as the table says it (under the run's id). */
const SOURCE = { runs: "run", chat: "chat completion", responses: "response" } as const;

type Status = z.infer<typeof RunStatus>;
type Route = z.infer<typeof RouteKind>;

/** A filter of one of `options`, or any when none is chosen. */
function AnyOf({ label, name, options, value }: { label: string; name: string; options: readonly string[]; value: string | undefined }) {
  return (
    <label>
      {label}{" "}
      <select name={name} defaultValue={value ?? ""}>
        <option value="">Any</option>
        {options.map((o) => (
          <option key={o}>{o}</option>
        ))}
      </select>
    </label>
  );
}

/**
 * A run by its id, or by the id of the response it is (`resp_X` is `run_X`): read first, so an unknown or
 * malformed id is said here, in words, and a known one opens its inspector with the run already read.
 */
function FindRun({ app, env }: { app: string; env: Env }) {
  const client = useQueryClient();
  const navigate = useNavigate();
  const [problem, setProblem] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const find = async (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const text = String(new FormData(e.currentTarget).get("id") ?? "").trim();
    const id = runIdOf(text);
    if (!id) {
      setProblem(text ? `“${text}” is not a run id. A run id starts with run_, a response id with resp_.` : "Enter a run id (run_…) or a response id (resp_…).");
      return;
    }
    setBusy(true);
    setProblem(null);
    try {
      await client.fetchQuery(runQuery(app, env, id));
      navigate(`/apps/${encodeURIComponent(app)}/${env}/runs/${encodeURIComponent(id)}`);
    } catch (err) {
      setProblem(err instanceof ApiFailure && err.status === 404 ? `No run ${id}${id !== text ? ` (${text})` : ""} in this app's ${env} environment.` : err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="inline-form" onSubmit={find} aria-labelledby="find-run-title" noValidate>
      <h2 id="find-run-title">Find a run</h2>
      <label>
        Run or response id <input name="id" autoComplete="off" spellCheck={false} placeholder="run_… or resp_…" onChange={() => setProblem(null)} />
      </label>
      <button type="submit" disabled={busy}>
        Open
      </button>
      {problem ? (
        <div className="form-problem">
          <ErrorNotice error={problem} />
        </div>
      ) : null}
    </form>
  );
}

export function Runs() {
  const { app, env } = useEnvParams();
  const [params, setParams] = useSearchParams();
  const filters = { user: params.get("user") || undefined, status: (params.get("status") || undefined) as Status | undefined, route: (params.get("route") || undefined) as Route | undefined };
  const runs = useCursorPages(["owner", app, env, "runs", filters], (page) => call(api.ownerListRuns({ params: { app, env }, query: { ...filters, ...page } })), { live: true });
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
  const rows = runs.data ?? [];
  return (
    <>
      <PageHeader title="Runs" />
      <FindRun app={app} env={env} />
      <form className="inline-form" onSubmit={filter} aria-label="Filter runs" key={params.toString()}>
        <label>
          User <input name="user" defaultValue={filters.user ?? ""} />
        </label>
        <AnyOf label="Status" name="status" options={RunStatus.options} value={filters.status} />
        <AnyOf label="Route" name="route" options={RouteKind.options} value={filters.route} />
        <button type="submit">Filter</button>
      </form>
      {runs.isPending && <Loading label="Loading runs" />}
      <ErrorNotice error={runs.error} />
      {runs.data && rows.length === 0 && <p>No runs match.</p>}
      <NewerRows pages={runs} what={["run", "runs"]} />
      {rows.length > 0 && (
        <DataTable
          className="run-list"
          stacked
          rows={rows}
          rowKey={(r) => r.id}
          columns={[
            {
              label: "Run",
              className: "col-run",
              cell: (r) => (
                <>
                  <Link to={encodeURIComponent(r.id)}>{r.id}</Link>
                  <span className="run-source">{SOURCE[r.source]}</span>
                </>
              ),
            },
            { label: "User", cell: (r) => r.user, className: "col-user" },
            { label: "Status", cell: (r) => <span className={`state state-${r.status}`}>{r.status}</span>, className: "col-status" },
            { label: "Route", cell: (r) => routeLabel(r), className: "col-route" },
            { label: "Model", cell: (r) => r.model, className: "col-model" },
            {
              label: "Tokens in / out",
              numeric: true,
              cell: (r) => (
                <>
                  {formatCount(r.usage.inputTokens)} / {formatCount(r.usage.outputTokens)}
                </>
              ),
            },
            { label: "Started", cell: (r) => <Time at={r.createdAt} style="short" />, className: "nowrap" },
          ]}
        />
      )}
      <LoadMore pages={runs}>Load more runs</LoadMore>
    </>
  );
}
