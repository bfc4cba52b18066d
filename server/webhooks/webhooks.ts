import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import { WebhookDispatcher, type DispatcherOptions } from "./dispatcher.js";
import { WebhookDeliveryLog } from "./deliveries.js";
import { WebhookEndpoints } from "./endpoints.js";
import { WebhookFacts } from "./facts.js";
import { EndpointInterest } from "./interest.js";
import type { WebhookOutbox } from "./outbox.js";
import { PresenceSweep } from "./presence.js";
import { WebhookManualSends } from "./resend.js";
import { lazySealer } from "./seal.js";
import type { DatabaseOutage } from "../db/outage.js";

/**
 * Outbound webhooks to the app, put together: the endpoints the app registers,
 * the facts services report (into the outbox), the dispatcher that sends them
 * signed and retried, and the delivery log the app reads.
 */
export class Webhooks {
  readonly endpoints: WebhookEndpoints;
  readonly log: WebhookDeliveryLog;
  /** Resends and test events asked for from the dashboard. */
  readonly manual: WebhookManualSends;
  readonly facts: WebhookFacts;
  readonly dispatcher: WebhookDispatcher;
  readonly presence: PresenceSweep;
  private readonly interest: EndpointInterest;

  constructor(db: Database, clock: Clock, config: Pick<Config, "webhooks" | "sealingKey" | "dataDir">, outbox: WebhookOutbox, logger: Logger, outage: DatabaseOutage | null = null, onAttempt?: DispatcherOptions["onAttempt"]) {
    const sealer = lazySealer(config.sealingKey, config.dataDir);
    this.interest = new EndpointInterest(db);
    this.endpoints = new WebhookEndpoints(db, clock, sealer, this.interest, config.webhooks.privateAddresses);
    this.log = new WebhookDeliveryLog(db);
    this.manual = new WebhookManualSends(db, clock, this.log);
    this.facts = new WebhookFacts(outbox, db, logger, this.interest);
    this.dispatcher = new WebhookDispatcher(db, clock, sealer, logger, { ...config.webhooks, outage, onAttempt });
    this.presence = new PresenceSweep(db, clock, this.facts, logger);
  }

  async start(): Promise<void> {
    await this.interest.start();
    await this.dispatcher.start();
    this.presence.start();
  }

  /** Stops sending (attempts in flight finish or are cut), then waits for facts still being recorded. */
  async close(): Promise<void> {
    this.presence.stop();
    await this.dispatcher.close();
    await this.facts.drain();
    await this.interest.close();
  }
}
