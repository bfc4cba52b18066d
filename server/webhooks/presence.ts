import type { Environment } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { HEARTBEAT_TIMEOUT_SECONDS } from "../machines/machines.js";
import { machineOnlineSql } from "../machines/liveness.js";
import type { WebhookFacts } from "./facts.js";

/** How far back a lapsed connection is still reported (older ones were reported then, or their app had no endpoint). */
const LOOKBACK_SECONDS = 3600;

/**
 * `machine.offline` for connections that ended without a goodbye anywhere: the
 * instance holding them died, so no close was seen. A machine whose instance
 * stopped saying it is alive for longer than the heartbeat timeout is offline
 * (GET /v1/machines says so too, liveness.ts); its connection is named by `connected_at`, the same key the
 * holding instance would have used, so a fact seen both ways is sent once.
 * Reads only: the machine's row is the machines service's.
 */
export class PresenceSweep {
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly facts: WebhookFacts,
    private readonly log: Logger,
    private readonly everyMs = 15_000,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      if (this.busy) return;
      this.busy = true;
      this.sweep()
        .catch((err) => this.log.warn({ err }, "machine presence sweep failed"))
        .finally(() => (this.busy = false));
    }, this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  async sweep(): Promise<void> {
    const now = this.clock.now().getTime();
    const rows = await this.db.query<{ id: string; app_id: string; environment: Environment; end_user_id: string; connected_at: Date }>(
      `SELECT m.id, m.app_id, m.environment, m.end_user_id, m.connected_at FROM machines m
        WHERE m.connected_instance IS NOT NULL AND m.revoked_at IS NULL AND m.connected_at IS NOT NULL
          AND NOT ${machineOnlineSql("m", "$1")}
          AND COALESCE((SELECT si.alive_at FROM server_instances si WHERE si.id = m.connected_instance), m.last_heartbeat_at) > $2
          AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.app_id = m.app_id AND e.environment = m.environment
                         AND e.disabled_at IS NULL AND 'machine.offline' = ANY(e.event_types))
        LIMIT 500`,
      [new Date(now - HEARTBEAT_TIMEOUT_SECONDS * 1000), new Date(now - LOOKBACK_SECONDS * 1000)],
    );
    for (const m of rows) {
      await this.facts.machineOffline({ machineId: m.id, appId: m.app_id, environment: m.environment, endUserId: m.end_user_id }, new Date(m.connected_at));
    }
  }
}
