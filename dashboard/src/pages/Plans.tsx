import { useState } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { z } from "zod";
import type { PlanUpdate } from "@svc/contract";
import { api, call } from "../api/client";
import { ConfirmButton } from "../components/ConfirmButton";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { PlanForm, type PlanFields } from "../components/PlanForm";
import { formatMoney } from "../format/money";
import { formatCount } from "../format/time";

export function Plans() {
  const { app, env } = useEnvParams();
  const client = useQueryClient();
  const [showArchived, setShowArchived] = useState(false);
  const [editing, setEditing] = useState<string | null>(null);
  const plans = useQuery({
    queryKey: ["owner", app, env, "plans", showArchived],
    queryFn: () => call(api.ownerListPlans({ params: { app, env }, query: showArchived ? { archived: "true" } : {} })),
  });
  const refresh = () => client.invalidateQueries({ queryKey: ["owner", app, env, "plans"] });
  /** The plan created last, and how many were: the form starts empty again after each (a second click would resend the same slug). */
  const [created, setCreated] = useState<{ name: string; slug: string; n: number } | null>(null);
  const create = useMutation({
    mutationFn: (body: PlanFields) => call(api.ownerCreatePlan({ params: { app, env }, body })),
    onSuccess: (plan) => (setCreated((c) => ({ name: plan.name, slug: plan.slug, n: (c?.n ?? 0) + 1 })), refresh()),
  });
  const update = useMutation({
    mutationFn: ({ slug, body }: { slug: string; body: z.input<typeof PlanUpdate> }) => call(api.ownerUpdatePlan({ params: { app, env, slug }, body })),
    onSuccess: () => (setEditing(null), refresh()),
  });
  const archive = useMutation({ mutationFn: (slug: string) => call(api.ownerArchivePlan({ params: { app, env, slug } })), onSuccess: refresh });

  return (
    <>
      <PageHeader title="Plans" />
      <div className="field field-check">
        <input id="show-archived" type="checkbox" checked={showArchived} onChange={(e) => setShowArchived(e.target.checked)} />
        <label htmlFor="show-archived">Show archived plans</label>
      </div>
      {plans.isPending && <Loading label="Loading plans" />}
      <ErrorNotice error={plans.error ?? update.error ?? archive.error} />
      {plans.data?.data.length === 0 && <p>No plans yet.</p>}
      {plans.data?.data.map((p) => (
        <article key={p.slug} className="card" aria-labelledby={`plan-${p.slug}`}>
          <h2 id={`plan-${p.slug}`}>
            {p.name} <span className="muted">{p.slug}</span>
            {p.isDefault && <span className="tag">default</span>}
            {p.archived && <span className="tag">archived</span>}
          </h2>
          <p>
            {formatMoney(p.priceMicros, p.currency)} per {p.period};{" "}
            {p.allowance.limit === null ? `unlimited ${p.allowance.unit}` : `${formatCount(p.allowance.limit)} ${p.allowance.unit}`}
            {p.overage && p.overagePriceMicros !== null && `, then ${formatMoney(p.overagePriceMicros, p.currency)} each ${p.allowance.unit === "tokens" ? "1,000 tokens" : "run"}`}
            {p.trialDays > 0 && `; ${p.trialDays}-day trial`}
            {p.spendCeilingMicros !== null && `; spend ceiling ${formatMoney(p.spendCeilingMicros, p.currency)}`}
          </p>
          {p.description && <p className="muted">{p.description}</p>}
          <div className="actions">
            <button type="button" aria-expanded={editing === p.slug} onClick={() => setEditing(editing === p.slug ? null : p.slug)} aria-label={`Edit ${p.name}`}>
              Edit
            </button>
            {!p.isDefault && !p.archived && (
              <button type="button" onClick={() => update.mutate({ slug: p.slug, body: { isDefault: true } })} aria-label={`Make default: ${p.name}`}>
                Make default
              </button>
            )}
            {!p.archived && (
              <ConfirmButton question={`Archive ${p.name}? Subscribers keep it; it is not sold any more.`} label={`Archive ${p.name}`} onConfirm={() => archive.mutate(p.slug)}>
                Archive
              </ConfirmButton>
            )}
          </div>
          {editing === p.slug && (
            <PlanForm plan={p} pending={update.isPending} submitLabel={`Save ${p.name}`} onSubmit={({ slug: _slug, ...body }) => update.mutate({ slug: p.slug, body })} />
          )}
        </article>
      ))}
      <section aria-labelledby="new-plan-title" className="card">
        <h2 id="new-plan-title">Create a plan</h2>
        <ErrorNotice error={create.error} />
        <p role="status" className={created ? "notice" : undefined}>
          {created && `Plan ${created.name} (${created.slug}) created: it is in the list above.`}
        </p>
        <PlanForm key={created?.n ?? 0} pending={create.isPending} submitLabel="Create plan" onSubmit={(fields) => create.mutate(fields)} />
      </section>
    </>
  );
}
