import type { z } from "zod";
import type { WebhookDelivery } from "@svc/contract";
import { formatTime } from "../format/time";

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
            <div className="table-scroll" tabIndex={0}>
              <table>
                <caption className="visually-hidden">Attempts of delivery {d.id}</caption>
                <thead>
                  <tr>
                    <th scope="col">Attempt</th>
                    <th scope="col">At</th>
                    <th scope="col">HTTP status</th>
                    <th scope="col">Error</th>
                    <th scope="col">Duration</th>
                  </tr>
                </thead>
                <tbody>
                  {d.attempts.map((a) => (
                    <tr key={a.attempt}>
                      <th scope="row">{a.attempt}</th>
                      <td>{formatTime(a.at)}</td>
                      <td>{a.statusCode ?? "—"}</td>
                      <td>{a.error ?? "—"}</td>
                      <td className="num">{a.durationMs} ms</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
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
