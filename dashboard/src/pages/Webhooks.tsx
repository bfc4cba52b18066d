import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { z } from "zod";
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from "@svc/contract";
import { api, call } from "../api/client";
import { ConfirmButton } from "../components/ConfirmButton";
import { LoadMore, NewerRows, useCursorPages } from "../components/CursorPages";
import { DataTable } from "../components/DataTable";
import { useEnvParams } from "../components/EnvScope";
import { ErrorNotice } from "../components/ErrorNotice";
import { Loading } from "../components/Loading";
import { PageHeader } from "../components/PageHeader";
import { SecretOnce } from "../components/SecretOnce";
import { DeliveryLog } from "../components/DeliveryLog";

type EventType = z.infer<typeof WebhookEventType>;

export function Webhooks() {
  const { app, env } = useEnvParams();
  const client = useQueryClient();
  const endpointsKey = ["owner", app, env, "webhook-endpoints"];
  const deliveriesKey = ["owner", app, env, "webhook-deliveries"];
  const endpoints = useQuery({ queryKey: endpointsKey, queryFn: () => call(api.ownerListWebhookEndpoints({ params: { app, env } })) });
  const deliveries = useCursorPages(deliveriesKey, (page) => call(api.ownerListWebhookDeliveries({ params: { app, env }, query: page })), { live: true });
  const [secret, setSecret] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const create = useMutation({
    mutationFn: (body: { url: string; events?: EventType[] }) => call(api.ownerCreateWebhookEndpoint({ params: { app, env }, body })),
    onSuccess: (e) => (setSecret(e.secret), client.invalidateQueries({ queryKey: endpointsKey })),
  });
  const remove = useMutation({ mutationFn: (id: string) => call(api.ownerDeleteWebhookEndpoint({ params: { app, env, id } })), onSuccess: () => client.invalidateQueries({ queryKey: endpointsKey }) });
  const test = useMutation({
    mutationFn: (id: string) => call(api.ownerTestWebhookEndpoint({ params: { app, env, id } })),
    onSuccess: (r) => (setNotice(`Test event queued as delivery ${r.deliveryId}.`), client.invalidateQueries({ queryKey: deliveriesKey })),
  });
  const resend = useMutation({
    mutationFn: (id: string) => call(api.ownerResendWebhookDelivery({ params: { app, env, id } })),
    onSuccess: (d) => (setNotice(`Delivery ${d.id} sent again.`), client.invalidateQueries({ queryKey: deliveriesKey })),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const events = form.getAll("events").map(String) as EventType[];
    create.mutate({ url: String(form.get("url")), events: events.length > 0 ? events : undefined });
    e.currentTarget.reset();
  };

  return (
    <>
      <PageHeader title="Webhooks" />
      {secret && <SecretOnce label="Signing secret" secret={secret} onDismiss={() => setSecret(null)} />}
      <p role="status">{notice}</p>
      <ErrorNotice error={endpoints.error ?? remove.error ?? test.error ?? resend.error} />
      <section aria-labelledby="endpoints-title">
        <h2 id="endpoints-title">Endpoints</h2>
        {endpoints.isPending && <Loading label="Loading endpoints" />}
        {endpoints.data?.data.length === 0 && <p>No endpoints yet.</p>}
        {endpoints.data && endpoints.data.data.length > 0 && (
          <DataTable
            rows={endpoints.data.data}
            rowKey={(e) => e.id}
            columns={[
              {
                label: "URL",
                cell: (e) => (
                  <>
                    <code>{e.url}</code>
                    {e.warning && (
                      <p className="notice notice-warning" role="note">
                        {e.warning}
                      </p>
                    )}
                  </>
                ),
              },
              { label: "Events", cell: (e) => e.events.join(", ") },
              { label: "State", cell: (e) => (e.disabled ? "disabled" : "active") },
              {
                label: "Actions",
                actions: true,
                cell: (e) => (
                  <>
                    <button type="button" onClick={() => test.mutate(e.id)} aria-label={`Send test event to ${e.url}`}>
                      Send test event
                    </button>
                    <ConfirmButton question={`Remove the endpoint ${e.url}?`} label={`Remove ${e.url}`} onConfirm={() => remove.mutate(e.id)}>
                      Remove
                    </ConfirmButton>
                  </>
                ),
              },
            ]}
          />
        )}
      </section>
      <form onSubmit={submit} className="card" aria-labelledby="add-endpoint-title">
        <h2 id="add-endpoint-title">Add an endpoint</h2>
        <div className="field">
          <label htmlFor="endpoint-url">Endpoint URL</label>
          <input id="endpoint-url" name="url" type="url" required placeholder="https://example.com/webhooks/svc" />
        </div>
        <fieldset>
          <legend>Events (none checked: every event)</legend>
          {WEBHOOK_EVENT_TYPES.map((t) => (
            <label key={t} className="check">
              <input type="checkbox" name="events" value={t} /> {t}
            </label>
          ))}
        </fieldset>
        <ErrorNotice error={create.error} />
        <button type="submit" className="primary" disabled={create.isPending}>
          Add endpoint
        </button>
      </form>
      <section aria-labelledby="deliveries-title">
        <h2 id="deliveries-title">Delivery log</h2>
        {deliveries.isPending && <Loading label="Loading deliveries" />}
        <ErrorNotice error={deliveries.error} />
        <NewerRows pages={deliveries} what={["delivery", "deliveries"]} />
        <DeliveryLog deliveries={deliveries.data ?? []} onResend={(id) => resend.mutate(id)} resending={resend.isPending} />
        <LoadMore pages={deliveries}>Load more deliveries</LoadMore>
      </section>
    </>
  );
}
