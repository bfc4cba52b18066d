import { setMaxListeners } from "node:events";
import { Webhook } from "standardwebhooks";
import type { Environment } from "@svc/contract";
import type { Database } from "../db/open.js";
import { systemClock, type Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { WEBHOOK_DUE_CHANNEL } from "./outbox.js";
import type { SecretSealer } from "./seal.js";
import { postOnce, type AttemptResult } from "./send.js";
import { allowsPrivate, type PrivateAddressPolicy } from "./address-guard.js";
import { isDatabaseUnavailable, type DatabaseOutage } from "../db/outage.js";

export interface DispatcherOptions {
  /** Seconds to wait before each retry; its length is the number of retries. */
  retrySchedule: number[];
  /** One attempt's time limit. */
  timeoutMs: number;
  /** Attempts in flight at once on this instance. */
  concurrency?: number;
  /** How often the outbox is looked at without a wake (lost notifications, retries due). */
  pollMs?: number;
  /** Which environments' endpoints may reach private addresses (default: none). */
  privateAddresses?: PrivateAddressPolicy;
  /** Told when a pass meets the database unreachable: the outage is logged once, not once a second. */
  outage?: DatabaseOutage | null;
  /** Told each attempt's outcome once it is recorded (the metrics count them). */
  onAttempt?: (outcome: "delivered" | "retrying" | "failed") => void;
}

interface Claimed {
  id: string;
  endpoint_id: string;
  body: string;
  attempt: number;
  url: string;
  secret: string;
  environment: Environment;
}

/** How long past an attempt's timeout its claim holds before another instance may take the delivery. */
const LEASE_MARGIN_MS = 30_000;
/** On shutdown, attempts in flight get this long to finish before they are cut (and recorded as interrupted). */
const SHUTDOWN_GRACE_MS = 2_000;

/**
 * Sends the outbox's deliveries. Any instance may send any delivery: a due one
 * is claimed with `FOR UPDATE SKIP LOCKED` and its next attempt time moved to a
 * lease, so instances never send the same attempt twice, and a delivery whose
 * instance died is taken again once the lease lapses. Each attempt is a POST of
 * the stored payload signed per Standard Webhooks (the same `webhook-id` on every
 * retry, a fresh timestamp and signature), logged in `webhook_attempts`, and
 * followed by the next try per the schedule or the end (`delivered`, `failed`).
 *
 * Woken by `svc_webhook_due`, by its own timer for the next retry it scheduled,
 * and by a poll. Stored times come from the service clock; `webhook-timestamp`
 * is wall-clock time, since receivers check it against theirs.
 */
export class WebhookDispatcher {
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly aborts = new AbortController();
  private stops: (() => Promise<void>)[] = [];
  private poll: NodeJS.Timeout | null = null;
  private retryTimer: { at: number; timer: NodeJS.Timeout } | null = null;
  private passing = false;
  private currentPass: Promise<void> | null = null;
  private again = false;
  private backlog = false;
  private closing = false;
  private readonly concurrency: number;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly sealer: SecretSealer,
    private readonly log: Logger,
    private readonly options: DispatcherOptions,
    private readonly wallClock: Clock = systemClock,
  ) {
    this.concurrency = options.concurrency ?? 16;
    // Every attempt in flight listens for the shutdown.
    setMaxListeners(this.concurrency + 1, this.aborts.signal);
  }

  async start(): Promise<void> {
    this.stops.push(await this.db.listen(WEBHOOK_DUE_CHANNEL, () => this.kick()));
    this.poll = setInterval(() => this.kick(), this.options.pollMs ?? 1000);
    this.poll.unref();
    this.kick();
  }

  /** Looks for due deliveries now (a pass already running looks again when it ends). */
  kick(): void {
    if (this.closing) return;
    if (this.passing) {
      this.again = true;
      return;
    }
    this.passing = true;
    this.currentPass = this.pass()
      // A database outage is logged once (by the outage record, which also probes for its end), not once a second here.
      .catch((err) => (isDatabaseUnavailable(err) && this.options.outage ? this.options.outage.report(err) : this.log.warn({ err }, "webhook dispatch pass failed")))
      .finally(() => {
        this.currentPass = null;
        this.passing = false;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.poll) clearInterval(this.poll);
    if (this.retryTimer) clearTimeout(this.retryTimer.timer);
    await Promise.all(this.stops.map((s) => s().catch(() => {})));
    // A pass still claiming adds its deliveries to those in flight: wait for it, so none is sent after close.
    await this.currentPass;
    if (this.inFlight.size) {
      const grace = new Promise((r) => setTimeout(r, Math.min(SHUTDOWN_GRACE_MS, this.options.timeoutMs)).unref());
      await Promise.race([Promise.all(this.inFlight.values()), grace]);
    }
    this.aborts.abort();
    await Promise.all(this.inFlight.values());
  }

  private async pass(): Promise<void> {
    const room = this.concurrency - this.inFlight.size;
    if (room <= 0) {
      this.backlog = true;
      return;
    }
    const claimed = await this.claim(room);
    this.backlog = claimed.length === room;
    for (const d of claimed) {
      const work = this.attempt(d)
        .catch((err) => this.log.error({ err, deliveryId: d.id }, "webhook attempt failed to record"))
        .finally(() => {
          this.inFlight.delete(d.id);
          // More was due than there was room for: take the next at once.
          if (this.backlog) this.kick();
        });
      this.inFlight.set(d.id, work);
    }
  }

  /** Takes up to `limit` due deliveries of enabled endpoints, each under a lease, counting the attempt. */
  private claim(limit: number): Promise<Claimed[]> {
    const now = this.clock.now();
    const lease = new Date(now.getTime() + this.options.timeoutMs + LEASE_MARGIN_MS);
    return this.db.query<Claimed>(
      `UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $2
         FROM webhook_endpoints e
        WHERE d.id IN (SELECT w.id FROM webhook_deliveries w JOIN webhook_endpoints we ON we.id = w.endpoint_id
                        WHERE w.status = 'pending' AND w.next_attempt_at <= $1 AND we.disabled_at IS NULL
                        ORDER BY w.next_attempt_at LIMIT $3 FOR UPDATE OF w SKIP LOCKED)
          AND e.id = d.endpoint_id
      RETURNING d.id, d.endpoint_id, d.payload::text AS body, d.attempts AS attempt, e.url, e.secret, d.environment::text AS environment`,
      [now, lease, limit],
    );
  }

  private async attempt(d: Claimed): Promise<void> {
    const at = this.clock.now();
    let result: AttemptResult;
    let secret: string | null = null;
    try {
      secret = this.sealer.open(d.secret, d.endpoint_id);
    } catch {
      result = { statusCode: null, error: "the endpoint's signing secret cannot be opened (was SVC_SEALING_KEY changed?)", durationMs: 0 };
    }
    if (secret !== null) {
      const sentAt = this.wallClock.now();
      const headers = {
        "content-type": "application/json",
        "user-agent": "svc-webhooks/1",
        "webhook-id": d.id,
        "webhook-timestamp": String(Math.floor(sentAt.getTime() / 1000)),
        "webhook-signature": new Webhook(secret).sign(d.id, sentAt, d.body),
      };
      const publicOnly = !allowsPrivate(this.options.privateAddresses ?? "none", d.environment);
      result = await postOnce(d.url, headers, d.body, this.options.timeoutMs, this.aborts.signal, publicOnly);
    }
    await this.record(d, at, result!);
  }

  /** Logs the attempt and moves the delivery on: delivered, the next try per the schedule, or failed for good. */
  private async record(d: Claimed, at: Date, r: AttemptResult): Promise<void> {
    const ok = r.error === null && r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300;
    const attempt = Number(d.attempt);
    const delay = this.options.retrySchedule[attempt - 1];
    const status = ok ? "delivered" : delay === undefined ? "failed" : "pending";
    const now = this.clock.now();
    const next = status === "pending" ? new Date(now.getTime() + delay * 1000) : null;
    await this.db.query(
      `WITH logged AS (
         INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (delivery_id, attempt) DO NOTHING RETURNING 1)
       UPDATE webhook_deliveries
          SET status = $7::"WebhookDeliveryStatus", next_attempt_at = $8, last_status_code = $4, last_error = $5,
              delivered_at = CASE WHEN $7 = 'delivered' THEN $9::timestamptz ELSE delivered_at END
        WHERE id = $1 AND attempts = $2 AND (status = 'pending' OR $7 = 'delivered')`,
      [d.id, attempt, at, r.statusCode, r.error, r.durationMs, status, next, now],
    );
    this.options.onAttempt?.(status === "pending" ? "retrying" : status);
    if (!ok) this.log.info({ deliveryId: d.id, attempt, statusCode: r.statusCode, error: r.error, next: next?.toISOString() ?? null }, "webhook attempt failed");
    if (next) this.wakeIn(delay * 1000);
  }

  /** A timer for the earliest retry this instance scheduled (the poll would find it too, later). */
  private wakeIn(ms: number): void {
    const at = Date.now() + ms;
    if (this.closing || (this.retryTimer && this.retryTimer.at <= at)) return;
    if (this.retryTimer) clearTimeout(this.retryTimer.timer);
    // A few ms late rather than early: the delivery is due by the clock when the timer fires.
    const timer = setTimeout(() => {
      this.retryTimer = null;
      this.kick();
    }, ms + 5);
    timer.unref();
    this.retryTimer = { at, timer };
  }
}
