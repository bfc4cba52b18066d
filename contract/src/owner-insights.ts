import { z } from "zod";
import { IsoTime, Micros, Page } from "./common.js";

/** One API request the app made with one of its app keys, as the dashboard's request log shows it. */
export const OwnerApiRequest = z.object({
  id: z.string(),
  requestId: z.string().describe("The `x-request-id` the answer carried: what a client's error shows."),
  method: z.string(),
  path: z.string().describe("As sent, without its query string."),
  route: z.string().describe("The contract's pattern (`/v1/runs/:id`)."),
  status: z.number().int(),
  errorCode: z.string().nullable().describe("The error envelope's `code` of a 4xx or 5xx."),
  durationMs: z.number().int().describe("From its arrival to its answer's end (a stream's whole life)."),
  runId: z.string().nullable().describe("The run it started (its `Service-Run-Id`) or acted on."),
  user: z.string().nullable().describe("The end user it named, or its run's user."),
  key: z
    .object({ id: z.string(), display: z.string(), name: z.string().nullable() })
    .describe("The app key it was made with."),
  createdAt: IsoTime,
});
export const OwnerApiRequestPage = Page(OwnerApiRequest).extend({
  retentionDays: z.number().int().describe("How many days requests are kept (`REQUEST_LOG_RETENTION_DAYS`); 0: the log is off on this deployment."),
});
export const OwnerApiRequestQuery = z.object({
  outcome: z.enum(["all", "succeeded", "failed"]).default("all").describe("`failed`: answered 4xx or 5xx."),
  method: z.enum(["GET", "POST", "PUT", "PATCH", "DELETE"]).optional(),
  path: z.string().max(512).optional().describe("Paths starting with this (`/v1/runs`)."),
  requestId: z.string().max(64).optional().describe("The one request with this `x-request-id`."),
  user: z.string().min(1).max(256).optional().describe("Requests naming this end user (or acting on their runs)."),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(128).optional(),
});

/** The environment at a glance: the dashboard's landing page. */
export const OwnerOverview = z.object({
  period: z.string().describe("The calendar month the period figures cover (UTC), e.g. `2026-11`."),
  runs: z.object({
    today: z.number().int().describe("Runs started since midnight UTC."),
    period: z.number().int().describe("Runs started this month."),
    failedToday: z.number().int(),
    handedBackToday: z.number().int().describe("Runs started since midnight UTC that were handed back to the app (`handed_back`: no machine could take them, so the app served them, `409 serve_in_app`)."),
    handedBackPeriod: z.number().int().describe("Runs started this month that were handed back to the app."),
    live: z.number().int().describe("Queued, running, waiting on the app or paused now."),
    paused: z.number().int().describe("Paused at a limit now (the plan's ceiling or allowance, a run's budget)."),
  }),
  spend: z.object({
    currency: z.string().describe("The environment's default plan's currency, else `usd` (as the usage summary's)."),
    todayMicros: Micros.describe("What the ledger recorded since midnight UTC, in integer micros of the plans' currency."),
    periodMicros: Micros,
  }),
  tokens: z.object({
    period: z.number().int().describe("Input, cache and output tokens the ledger recorded this month."),
  }),
  previous: z
    .object({
      period: z.string(),
      runs: z.number().int(),
      spendMicros: Micros,
      tokens: z.number().int(),
    })
    .describe("The month before, whole: what this month's figures stand against."),
  recentFailures: z
    .array(z.object({ runId: z.string(), user: z.string(), code: z.string().nullable(), message: z.string().nullable(), at: IsoTime }))
    .describe("The last five failed runs of the last 7 days, newest first."),
  users: z.object({
    total: z.number().int(),
    activeThisPeriod: z.number().int().describe("Users with a run this month."),
  }),
  machines: z.object({
    paired: z.number().int(),
    online: z.number().int(),
  }),
  requests: z.object({
    last24h: z.number().int().describe("API requests made with the app's keys in the last 24 hours (0 when the request log is off)."),
    failedLast24h: z.number().int(),
    logEnabled: z.boolean(),
  }),
  webhooks: z.object({
    failedLast24h: z.number().int().describe("Deliveries that failed for good in the last 24 hours."),
    retrying: z.number().int().describe("Deliveries waiting for their next attempt."),
    endpoints: z.number().int(),
  }),
  generatedAt: IsoTime,
});

