import type { z } from "zod";
import type { OwnerApiRequestPage, OwnerApiRequestQuery, OwnerOverview } from "@svc/contract";
import type { Clock } from "../clock.js";
import type { Database } from "../db/open.js";
import type { Tenant } from "../keys/keys.js";
import type { RequestLog } from "../requests/request-log.js";
import { listApiRequests } from "../requests/request-reads.js";
import { overviewOf } from "./overview.js";

/** The app owner's view of an environment as a whole: its overview and its API request log. */
export class Insights {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    readonly requestLog: RequestLog,
    private readonly heartbeatTimeoutSeconds: number,
  ) {}

  overview(tenant: Tenant): Promise<z.infer<typeof OwnerOverview>> {
    return overviewOf(this.db, this.clock, tenant, this.heartbeatTimeoutSeconds, this.requestLog.enabled);
  }

  requests(tenant: Tenant, q: z.infer<typeof OwnerApiRequestQuery>): Promise<z.infer<typeof OwnerApiRequestPage>> {
    return listApiRequests(this.db, tenant, q, this.requestLog.retentionDays);
  }
}
