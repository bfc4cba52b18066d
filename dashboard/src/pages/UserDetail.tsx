import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { Link, useParams } from "react-router";
import { api, call } from "../api/client";
import { ConfirmButton } from "../components/ConfirmButton";
import { LIVE_INTERVAL_MS } from "../components/CursorPages";
import { DataTable } from "../components/DataTable";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { formatMoney } from "../format/money";

/** What each reason a runtime cannot run on its machine means, in a few words (the message says the rest). */
const UNAVAILABLE = { sandbox_missing: "no sandbox on the machine", sandbox_refused: "the machine refuses the sandbox", cli_not_launchable: "the CLI does not start" } as const;
import { formatCount, formatTime } from "../format/time";

export function UserDetail() {
  const { app, env } = useEnvParams();
  const user = useParams().user!;
  const client = useQueryClient();
  const queryKey = ["owner", app, env, "user", user];
  // Kept up while shown (machines come online and go, sessions end, usage grows); not after a refusal.
  const detail = useQuery({ queryKey, queryFn: () => call(api.ownerGetUser({ params: { app, env, user } })), refetchInterval: (q) => (q.state.error ? false : LIVE_INTERVAL_MS) });
  const plans = useQuery({ queryKey: ["owner", app, env, "plans", false], queryFn: () => call(api.ownerListPlans({ params: { app, env }, query: {} })) });
  const refresh = () => client.invalidateQueries({ queryKey });
  const setPlan = useMutation({ mutationFn: (plan: string | null) => call(api.ownerSetUserPlan({ params: { app, env, user }, body: { plan } })), onSuccess: refresh });
  const removeMachine = useMutation({ mutationFn: (machineId: string) => call(api.ownerRemoveMachine({ params: { app, env, user, machineId } })), onSuccess: refresh });

  const d = detail.data;
  return (
    <>
      <PageHeader title={`End user ${user}`}>
        <Link to={`/apps/${encodeURIComponent(app)}/${env}/users`}>All end users</Link>
      </PageHeader>
      {detail.isPending && <Loading label="Loading the user" />}
      <ErrorNotice error={detail.error ?? setPlan.error ?? removeMachine.error} />
      {d && (
        <>
          <section aria-labelledby="plan-title" className="card">
            <h2 id="plan-title">Plan and allowance</h2>
            <dl className="facts">
              <dt>Email</dt>
              <dd>{d.user.email ?? "—"}</dd>
              <dt>Plan</dt>
              <dd>{d.user.plan ? `${d.user.plan.name} (${d.user.plan.slug})` : "none"}</dd>
              <dt>Subscription</dt>
              <dd>{d.user.subscription ? `${d.user.subscription.status} (${d.user.subscription.source}), period ends ${formatTime(d.user.subscription.currentPeriodEnd)}` : "none"}</dd>
              <dt>Allowance</dt>
              <dd>
                {formatCount(d.user.allowance.used)} of {d.user.allowance.limit === null ? "unlimited" : formatCount(d.user.allowance.limit)} {d.user.allowance.unit} used
                {d.user.allowance.reached && <strong> (reached)</strong>}
              </dd>
              <dt>Usage this period ({d.user.usage.period})</dt>
              <dd>
                {formatCount(d.user.usage.runs)} runs, {formatCount(d.user.usage.inputTokens)} input and {formatCount(d.user.usage.outputTokens)} output tokens,{" "}
                {formatMoney(d.user.usage.amountMicros, d.currency)}
              </dd>
            </dl>
            <div className="field">
              <label htmlFor="set-plan">Set the plan</label>
              <select id="set-plan" value={d.user.plan?.slug ?? ""} disabled={setPlan.isPending} onChange={(e) => setPlan.mutate(e.target.value || null)}>
                <option value="">The default plan</option>
                {plans.data?.data.map((p) => (
                  <option key={p.slug} value={p.slug}>
                    {p.name}
                  </option>
                ))}
              </select>
            </div>
          </section>
          <section aria-labelledby="machines-title">
            <h2 id="machines-title">Machines</h2>
            {d.machines.length === 0 && <p>No machine paired.</p>}
            {d.machines.map((m) => (
              <article key={m.id} className="card" aria-labelledby={`machine-${m.id}`}>
                <h3 id={`machine-${m.id}`}>
                  {m.hostname} <span className={`state state-${m.state}`}>{m.state}</span>
                </h3>
                <p className="muted">
                  {m.platform}/{m.arch}, worker {m.client}, paired {formatTime(m.pairedAt)}, last seen {formatTime(m.lastSeenAt)}
                </p>
                <DataTable
                  caption={`Runtimes on ${m.hostname}`}
                  rows={m.runtimes}
                  rowKey={(r) => r.name}
                  columns={[
                    { label: "Runtime", cell: (r) => r.name },
                    { label: "Version", cell: (r) => r.version ?? "—" },
                    { label: "Cost class", cell: (r) => r.costClass },
                    { label: "Subscription windows", cell: (r) => (r.limits?.windows.length ? r.limits.windows.map(windowText).join("; ") : "—") },
                    {
                      label: "State",
                      cell: (r) => (
                        <>
                          {r.unavailable ? `cannot run (${UNAVAILABLE[r.unavailable.reason]})` : r.state}
                          {!r.supported && ` (unsupported${r.note ? `: ${r.note}` : ""})`}
                          {r.unavailable && <p className="muted">{r.unavailable.message}</p>}
                        </>
                      ),
                    },
                  ]}
                />
                <ConfirmButton question={`Remove ${m.hostname}? It must pair again to serve.`} label={`Remove machine ${m.hostname}`} onConfirm={() => removeMachine.mutate(m.id)}>
                  Remove machine
                </ConfirmButton>
              </article>
            ))}
          </section>
          <section aria-labelledby="sessions-title">
            <h2 id="sessions-title">Sessions</h2>
            <DataTable
              rows={d.sessions}
              rowKey={(s) => s.id}
              columns={[
                { label: "Session", cell: (s) => <code>{s.id}</code> },
                { label: "Created", cell: (s) => formatTime(s.createdAt) },
                { label: "Expires", cell: (s) => formatTime(s.expiresAt) },
                { label: "State", cell: (s) => (s.live ? "live" : s.endedAt ? `ended ${formatTime(s.endedAt)}` : "expired") },
              ]}
            />
          </section>
          <p>
            <Link to={`/apps/${encodeURIComponent(app)}/${env}/runs?user=${encodeURIComponent(user)}`}>
              This user's runs
            </Link>
          </p>
        </>
      )}
    </>
  );
}

/** An agent CLI's subscription window as its machine last reported it: `5h: spent, resets 27 Nov 10:00`, `7d: 93% used (warning)`. */
function windowText(w: { window: string; status: "allowed" | "warning" | "rejected"; usedPercent?: number; resetsAt?: string }): string {
  const used = w.usedPercent !== undefined ? `${Math.round(w.usedPercent)}% used` : null;
  const resets = w.resetsAt ? `, resets ${formatTime(w.resetsAt)}` : "";
  if (w.status === "rejected") return `${w.window}: spent${resets}`;
  if (w.status === "warning") return `${w.window}: ${used ?? "near its limit"} (warning)${resets}`;
  return `${w.window}: ${used ?? "usable"}`;
}
