import { useQuery } from "@tanstack/react-query";
import { Link, Navigate, useParams } from "react-router";
import type { z } from "zod";
import { MAX_INSPECTED_CONTINUATIONS, type OwnerRunContinuation } from "@svc/contract";
import type { api } from "../api/client";
import { ACTIVE_RUN_STATUSES, routeLabel, runIdOf, runQuery } from "../api/runs";
import { LIVE_INTERVAL_MS } from "../components/CursorPages";
import { DataTable } from "../components/DataTable";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { RunTimeline } from "../components/RunTimeline";
import { microsToDecimal } from "../format/money";
import { Time } from "../components/Time";
import { formatCount, formatDuration, sameLocalDay } from "../format/time";

/**
 * One run inspected: where it ran, what happened turn by turn, who approved what, what it cost.
 * A run that has not ended is read again every LIVE_INTERVAL_MS while the tab is visible; once it has ended, not.
 */
export function RunDetail() {
  const { app, env } = useEnvParams();
  const id = useParams().id!;
  const runId = runIdOf(id);
  const detail = useQuery({
    ...runQuery(app, env, runId ?? id),
    enabled: runId === id,
    refetchInterval: (q) => (q.state.error || (q.state.data && !ACTIVE_RUN_STATUSES.has(q.state.data.run.status)) ? false : LIVE_INTERVAL_MS),
  });
  const d = detail.data;
  const base = `/apps/${encodeURIComponent(app)}/${env}`;
  // A response's id names its run: the inspector's address is the run's.
  if (runId && runId !== id) return <Navigate to={`${base}/runs/${encodeURIComponent(runId)}`} replace />;
  const live = d !== undefined && ACTIVE_RUN_STATUSES.has(d.run.status);
  return (
    <>
      <PageHeader title={`Run ${id}`}>
        <Link to={`${base}/runs`}>All runs</Link>
      </PageHeader>
      {detail.isPending && runId && <Loading label="Loading the run" />}
      <ErrorNotice error={runId ? detail.error : `“${id}” is not a run id: a run id starts with run_ (a response id, resp_…, opens its run).`} />
      {live && (
        <p className="muted" role="status">
          This run has not ended: the page follows it as it goes.
        </p>
      )}
      {d && (
        <>
          <section aria-labelledby="run-facts" className="card">
            <h2 id="run-facts">Summary</h2>
            <dl className="facts">
              <dt>Status</dt>
              <dd>
                <span className={`state state-${d.run.status}`}>{d.run.status}</span>
                {d.run.stopReason && ` (${d.run.stopReason})`}
              </dd>
              <dt>Started by</dt>
              <dd>{d.response ? `POST /v1/responses (${d.response.id})` : d.run.source === "chat" ? "POST /v1/chat/completions" : "POST /v1/runs"}</dd>
              <dt>User</dt>
              <dd>
                <Link to={`${base}/users/${encodeURIComponent(d.run.user)}`}>{d.run.user}</Link>
              </dd>
              <dt>Route</dt>
              <dd data-fact="route">{routeLabel(d.run)}</dd>
              <dt>Machine</dt>
              <dd>{d.machine ? `${d.machine.hostname} (${d.machine.id}, ${d.machine.state})` : (d.run.machineId ?? "—")}</dd>
              <dt>Runtime and model</dt>
              <dd>
                {d.run.runtime ?? "—"}, {d.run.model}
              </dd>
              <dt>Turns</dt>
              <dd>{d.run.turns}</dd>
              <dt>Tokens</dt>
              <dd>
                {formatCount(d.run.usage.inputTokens)} in, {formatCount(d.run.usage.outputTokens)} out
              </dd>
              <dt>Started, finished</dt>
              <dd>
                <Time at={d.run.createdAt} />, {d.run.finishedAt ? <Time at={d.run.finishedAt} style={sameLocalDay(d.run.createdAt, d.run.finishedAt) ? "clock" : "full"} /> : live ? "not yet" : "—"}
                {d.run.finishedAt && <span className="muted"> (took {formatDuration(Date.parse(d.run.finishedAt) - Date.parse(d.run.createdAt))})</span>}
              </dd>
              {d.run.error && (
                <>
                  <dt>Error</dt>
                  <dd>
                    <code>{d.run.error.code}</code> {d.run.error.message}
                  </dd>
                </>
              )}
            </dl>
          </section>
          {(d.previousRunId || d.continuedBy.length > 0) && <Conversation base={base} previousRunId={d.previousRunId} continuedBy={d.continuedBy} />}
          {d.run.status === "handed_back" && (
            <section aria-labelledby="reported-title" className="card">
              <h2 id="reported-title">Handed back to the app</h2>
              {d.reportedUsage ? (
                <p>
                  The app reported {formatCount(d.reportedUsage.inputTokens)} input and {formatCount(d.reportedUsage.outputTokens)} output tokens, <Time at={d.reportedUsage.reportedAt} />.
                </p>
              ) : (
                <p>The app has not reported usage for this run yet.</p>
              )}
            </section>
          )}
          {d.response && <ResponseItems response={d.response} />}
          {d.run.output && (
            <section aria-labelledby="output-title">
              <h2 id="output-title">Output</h2>
              <pre className="output">{d.run.output}</pre>
            </section>
          )}
          <section aria-labelledby="approvals-title">
            <h2 id="approvals-title">Approvals</h2>
            {d.approvals.length === 0 ? (
              <p>No tool call asked for approval.</p>
            ) : (
              <DataTable
                rows={d.approvals}
                rowKey={(a) => a.callId}
                columns={[
                  {
                    label: "Tool",
                    cell: (a) => (
                      <>
                        {a.tool} <span className="muted">{a.callId}</span>
                      </>
                    ),
                  },
                  { label: "Decision", cell: (a) => a.decision ?? "waiting" },
                  { label: "Decided by", cell: (a) => a.decidedBy ?? "—" },
                  { label: "Reason", cell: (a) => a.reason ?? "—" },
                  {
                    label: "Asked, decided",
                    cell: (a) => (
                      <>
                        <Time at={a.askedAt} style={sameLocalDay(d.run.createdAt, a.askedAt) ? "clock" : "full"} />, {a.decidedAt ? <Time at={a.decidedAt} style={sameLocalDay(a.askedAt, a.decidedAt) ? "clock" : "full"} /> : "not yet"}
                      </>
                    ),
                  },
                ]}
              />
            )}
          </section>
          <RunTimeline events={d.events} toolCalls={d.toolCalls} approvals={d.approvals} live={live} startedAt={d.run.createdAt} />
          <section aria-labelledby="ledger-title">
            <h2 id="ledger-title">Usage and ledger rows</h2>
            {d.ledger.length === 0 ? (
              <p>No ledger rows.</p>
            ) : (
              <DataTable
                rows={d.ledger}
                rowKey={(row) => row.id}
                columns={[
                  { label: "Row", cell: (row) => <code>{row.id}</code> },
                  { label: "Kind", cell: (row) => row.kind },
                  { label: "Cost class", cell: (row) => row.costClass },
                  {
                    label: "Tokens in / out",
                    numeric: true,
                    cell: (row) => (
                      <>
                        {formatCount(row.inputTokens)} / {formatCount(row.outputTokens)}
                      </>
                    ),
                  },
                  { label: "Amount (plan currency)", numeric: true, cell: (row) => microsToDecimal(row.amountMicros) },
                  { label: "At", cell: (row) => <Time at={row.createdAt} style={sameLocalDay(d.run.createdAt, row.createdAt) ? "clock" : "full"} /> },
                ]}
              />
            )}
          </section>
        </>
      )}
    </>
  );
}

/**
 * The run's place in its conversation: the run it continues (a follow-up, `previousRunId`) and the runs that
 * continued it, oldest first (the first MAX_INSPECTED_CONTINUATIONS), each a link to its own page.
 */
function Conversation({ base, previousRunId, continuedBy }: { base: string; previousRunId: string | null; continuedBy: z.infer<typeof OwnerRunContinuation>[] }) {
  const to = (id: string) => `${base}/runs/${encodeURIComponent(id)}`;
  return (
    <section aria-labelledby="conversation-title" className="card">
      <h2 id="conversation-title">Conversation</h2>
      <dl className="facts">
        {previousRunId && (
          <>
            <dt>Continues</dt>
            <dd>
              <Link to={to(previousRunId)}>{previousRunId}</Link>
            </dd>
          </>
        )}
        {continuedBy.length > 0 && (
          <>
            <dt>Continued by</dt>
            <dd>
              <ul className="plain-list">
                {continuedBy.map((r) => (
                  <li key={r.id}>
                    <Link to={to(r.id)}>{r.id}</Link> <span className={`state state-${r.status}`}>{r.status}</span>{" "}
                    <Time at={r.createdAt} className="muted" />
                  </li>
                ))}
              </ul>
              {continuedBy.length >= MAX_INSPECTED_CONTINUATIONS && <p className="muted">The first {MAX_INSPECTED_CONTINUATIONS} follow-ups.</p>}
            </dd>
          </>
        )}
      </dl>
    </section>
  );
}

type InspectedResponse = NonNullable<Awaited<ReturnType<typeof api.ownerGetRun>>["body"] extends infer B ? (B extends { response: infer R } ? R : never) : never>;

/** A response's items: what the request gave (its instructions and input items) and, when known without its events, what it answered. */
function ResponseItems({ response }: { response: InspectedResponse }) {
  const said = (item: Record<string, unknown>): string => {
    if (item.type === "message") {
      const content = item.content as { type: string; text?: string; image_url?: string }[];
      return content.map((p) => p.text ?? (p.type === "input_image" ? "[image]" : `[${p.type}]`)).join("");
    }
    if (item.type === "function_call") return `${String(item.name)}(${String(item.arguments)})`;
    if (item.type === "function_call_output") return String(item.output);
    return "";
  };
  const who = (item: Record<string, unknown>) => (item.type === "message" ? String(item.role) : String(item.type).replaceAll("_", " "));
  return (
    <section aria-labelledby="response-title" className="card">
      <h2 id="response-title">Response items</h2>
      {response.deleted ? (
        <p>The response was deleted: its input and output are gone (its usage stays).</p>
      ) : !response.store ? (
        <p>Not stored (<code>store: false</code>): its input items were not kept.</p>
      ) : null}
      {response.previousResponseId && <p>Continues {response.previousResponseId}.</p>}
      {response.instructions && (
        <p>
          Instructions: <q>{response.instructions}</q>
        </p>
      )}
      {response.input.length > 0 && (
        <DataTable
          rows={response.input}
          rowKey={(i) => i.id}
          columns={[
            { label: "Input item", cell: (i) => who(i) },
            { label: "Content", cell: (i) => <span className="wrap">{said(i)}</span> },
          ]}
        />
      )}
      {response.output && response.output.length > 0 && (
        <DataTable
          rows={response.output}
          rowKey={(i) => i.id}
          columns={[
            { label: "Output item", cell: (i) => who(i) },
            { label: "Content", cell: (i) => <span className="wrap">{said(i as unknown as Record<string, unknown>)}</span> },
          ]}
        />
      )}
    </section>
  );
}
