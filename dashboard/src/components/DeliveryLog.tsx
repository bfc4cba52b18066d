import type { z } from "zod";
import type { WebhookDelivery } from "@svc/contract";
import { formatTime } from "../format/time";
import { DataTable } from "./DataTable";

type Delivery = z.infer<typeof WebhookDelivery>;

/** Every delivery with every attempt (status, error, duration), and a resend button. */
export function DeliveryLog({ deliveries, onResend, resending }: { deliveries: Delivery[]; onResend: (id: string) => void; resending: boolean }) {
  if (deliveries.length === 0) return <p>No deliveries yet.</p>;
  return (
    <ul className="deliveries">
      {deliveries.map((d) => (
        <li key={d.id} className="card">
          <details>
            <summary>
              <span className={`state state-${d.status}`}>{d.status}</span> {d.type} <code>{d.id}</code> <time dateTime={d.createdAt}>{formatTime(d.createdAt)}</time>
            </summary>
            {d.lastError && <p>Last error: {d.lastError}</p>}
            {d.nextAttemptAt && <p>Next attempt {formatTime(d.nextAttemptAt)}</p>}
            <DataTable
              caption={`Attempts of delivery ${d.id}`}
              rows={d.attempts}
              rowKey={(a) => a.attempt}
              columns={[
                { label: "Attempt", cell: (a) => a.attempt },
                { label: "At", cell: (a) => formatTime(a.at) },
                { label: "HTTP status", cell: (a) => a.statusCode ?? "—" },
                { label: "Error", cell: (a) => a.error ?? "—" },
                { label: "Duration", numeric: true, cell: (a) => `${a.durationMs} ms` },
              ]}
            />
            <pre>{JSON.stringify(d.payload, null, 2)}</pre>
          </details>
          <button type="button" onClick={() => onResend(d.id)} disabled={resending} aria-label={`Resend delivery ${d.id}`}>
            Resend
          </button>
        </li>
      ))}
    </ul>
  );
}
