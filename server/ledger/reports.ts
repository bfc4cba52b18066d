import type { Readable } from "node:stream";
import type { z } from "zod";
import type { Conversions, RangeQuery, UsagePage, UsageQuery, UsageSummary } from "@svc/contract";
import type { Database } from "../db/open.js";
import type { Clock } from "../clock.js";
import type { Tenant } from "../keys/keys.js";
import { listUsage } from "./usage.js";
import { dayRange, usageCsv, usageSummary, type DayRange } from "./usage-summary.js";
import { conversions } from "../billing/conversions.js";

/**
 * The ledger's reports, for the routes: the app's usage rows, and an
 * environment's summary, CSV export and conversions for its owner. The routes
 * see this service, never the database; the queries stay where they are.
 */
export class LedgerReports {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  /** `GET /v1/usage`: a page of the ledger's rows. */
  usage(tenant: Tenant, query: z.infer<typeof UsageQuery>): Promise<z.infer<typeof UsagePage>> {
    return listUsage(this.db, tenant, query);
  }

  /** The owner's summary of the days asked (default: the last 30). */
  summary(tenant: Tenant, query: z.infer<typeof RangeQuery>): Promise<z.infer<typeof UsageSummary>> {
    return usageSummary(this.db, tenant, dayRange(query, this.clock.now()));
  }

  /** The owner's CSV of the days asked, streamed as it is read, and the days it covers (for its file name). */
  usageCsv(tenant: Tenant, query: z.infer<typeof RangeQuery>): { range: DayRange; csv: Readable } {
    const range = dayRange(query, this.clock.now());
    return { range, csv: usageCsv(this.db, tenant, range) };
  }

  /** Trials started, converted and cancelled in the days asked. */
  conversions(tenant: Tenant, query: z.infer<typeof RangeQuery>): Promise<z.infer<typeof Conversions>> {
    return conversions(this.db, tenant, dayRange(query, this.clock.now()));
  }
}
