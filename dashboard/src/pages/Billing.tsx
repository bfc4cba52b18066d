import { useMutation, useQuery } from "@tanstack/react-query";
import { api, call } from "../api/client";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { formatTime } from "../format/time";

const yesNo = (v: boolean | null) => (v === null ? "not known" : v ? "yes" : "no");

export function Billing() {
  const { app, env } = useEnvParams();
  const account = useQuery({ queryKey: ["owner", app, env, "billing"], queryFn: () => call(api.ownerGetBillingAccount({ params: { app, env } })) });
  const connect = useMutation({
    mutationFn: (mode: "oauth" | "create") => call(api.ownerConnectBilling({ params: { app, env }, body: { mode, returnUrl: window.location.href } })),
    onSuccess: (start) => window.location.assign(start.url),
  });
  const a = account.data;
  return (
    <>
      <PageHeader title="Billing" />
      {account.isPending && <Loading label="Loading the Stripe account" />}
      <ErrorNotice error={account.error ?? connect.error} />
      {a && (
        <section aria-labelledby="stripe-title" className="card">
          <h2 id="stripe-title">Stripe account</h2>
          {a.stripeAccountId ? (
            <dl className="facts">
              <dt>Account</dt>
              <dd>
                <code>{a.stripeAccountId}</code> ({a.connectedVia}, connected {formatTime(a.connectedAt)})
              </dd>
              <dt>Charges enabled</dt>
              <dd>{yesNo(a.chargesEnabled)}</dd>
              <dt>Details submitted</dt>
              <dd>{yesNo(a.detailsSubmitted)}</dd>
              <dt>Payouts enabled</dt>
              <dd>{yesNo(a.payoutsEnabled)}</dd>
              {a.requirements && a.requirements.currentlyDue.length > 0 && (
                <>
                  <dt>Stripe still needs</dt>
                  <dd>{a.requirements.currentlyDue.join(", ")}</dd>
                </>
              )}
              {a.requirements?.disabledReason && (
                <>
                  <dt>Why charges are off</dt>
                  <dd>{a.requirements.disabledReason}</dd>
                </>
              )}
              <dt>Checked</dt>
              <dd>{formatTime(a.checkedAt)}</dd>
            </dl>
          ) : (
            <p>No Stripe account is connected to the {env} environment: plans cannot be sold through checkout yet.</p>
          )}
          <div className="actions">
            <button type="button" className="primary" onClick={() => connect.mutate("oauth")} disabled={connect.isPending}>
              {a.stripeAccountId ? "Connect another Stripe account" : "Connect a Stripe account"}
            </button>
            <button type="button" onClick={() => connect.mutate("create")} disabled={connect.isPending}>
              {a.connectedVia === "created" && !a.detailsSubmitted ? "Continue Stripe onboarding" : "Create a new Stripe account"}
            </button>
          </div>
          <p className="muted">
            Stripe sends this account's events to <code>{a.webhookUrl}</code>.
          </p>
        </section>
      )}
    </>
  );
}
