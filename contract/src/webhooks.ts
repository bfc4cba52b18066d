import { z } from "zod";
import { IsoTime, Page, Standing, UserId } from "./common.js";
import { PauseLimit, RunBudgetStanding } from "./runs.js";

/**
 * Webhooks the service sends to the app, signed per Standard Webhooks
 * (`webhook-id`, `webhook-timestamp`, `webhook-signature` headers; verify with
 * the `standardwebhooks` library and the endpoint's `whsec_` secret). The read
 * endpoints stay the authority; a webhook says something happened.
 */
export const WEBHOOK_EVENT_TYPES = [
  "run.finished",
  "machine.paired",
  "machine.online",
  "machine.offline",
  "plan.changed",
  "allowance.reached",
  "allowance.threshold",
  "run.paused",
  "run.resumed",
  "runtime.window_spent",
  "runtime.window_reset",
  "test.ping",
] as const;
/** What an endpoint subscribes to by default: every fact. `test.ping` is sent only when asked for, to that endpoint, whatever it chose. */
export const WEBHOOK_FACT_TYPES = WEBHOOK_EVENT_TYPES.filter((t) => t !== "test.ping");
export const WebhookEventType = z.enum(WEBHOOK_EVENT_TYPES);
export type WebhookEventType = z.infer<typeof WebhookEventType>;

/** What an alert threshold is a percentage of: the plan's allowance in its unit, or its spend ceiling. */
export const ThresholdMeasure = z.enum(["allowance", "spend"]);
export type ThresholdMeasure = z.infer<typeof ThresholdMeasure>;

/** `data` of `allowance.threshold`: sent once per user, window, measure and threshold. */
export const AllowanceThresholdData = z.object({
  user: UserId,
  measure: ThresholdMeasure.describe("`allowance`: the plan's allowance in its unit; `spend`: the plan's spend ceiling (for a plan whose allowance is unlimited)."),
  threshold: z.number().int().describe("The percentage crossed, one of the plan's `alertThresholds`."),
  period: z.string(),
  allowance: Standing.describe("Where the user stood when it was crossed."),
});
/** `data` of `run.paused`: once per pause. */
export const RunPausedData = z.object({
  runId: z.string(),
  user: UserId,
  limit: PauseLimit,
  allowance: Standing,
  budget: RunBudgetStanding.nullable(),
  pausedAt: IsoTime,
  expiresAt: IsoTime,
});
/** `data` of `run.resumed`: once per pause that ended in a resume. */
export const RunResumedData = z.object({
  runId: z.string(),
  user: UserId,
  limit: PauseLimit,
  reason: z.enum(["plan_changed", "new_period", "budget_raised"]),
  pausedMs: z.number().int(),
});

/** What every webhook's body is: its type, when it was recorded, and its data. */
export const WebhookPayload = z
  .object({
    type: WebhookEventType,
    timestamp: IsoTime,
    data: z
      .union([AllowanceThresholdData, RunPausedData, RunResumedData, z.record(z.unknown())])
      .describe("The event's data: `AllowanceThresholdData`, `RunPausedData`, `RunResumedData` for those events; for the others, the fields listed in the webhooks guide."),
  })
  .describe("The JSON body sent: `{type, timestamp, data}`.");

export const CreateWebhookEndpoint = z.object({
  url: z.string().url().max(2000).refine((u) => /^https?:\/\//.test(u), "http or https"),
  events: z.array(WebhookEventType).min(1).optional().describe("Default: every event type. A test event (`test.ping`, sent from the dashboard) reaches the endpoint whatever it chose."),
});

export const WebhookEndpoint = z.object({
  id: z.string(),
  url: z.string(),
  events: z.array(WebhookEventType),
  createdAt: IsoTime,
  disabled: z.boolean(),
  warning: z
    .string()
    .nullable()
    .describe("Why every delivery would be refused, with the setting that allows it (a loopback or private address the service's `WEBHOOK_PRIVATE_ADDRESSES` does not let this environment reach); null when nothing is known against it."),
});
export const CreatedWebhookEndpoint = WebhookEndpoint.extend({
  secret: z.string().describe("`whsec_...`: shown once; verify signatures with it."),
});
export const WebhookEndpointList = z.object({ data: z.array(WebhookEndpoint) });
export const WebhookEndpointParam = z.object({ id: z.string().min(1).max(64) });

export const WebhookAttempt = z.object({
  attempt: z.number().int(),
  at: IsoTime,
  statusCode: z.number().int().nullable(),
  error: z.string().nullable(),
  durationMs: z.number().int(),
});

/** Where a webhook delivery stands: `failed`, every retry was used up. */
export const WebhookDeliveryStatus = z.enum(["pending", "delivered", "failed"]);
export type WebhookDeliveryStatus = z.infer<typeof WebhookDeliveryStatus>;

export const WebhookDelivery = z.object({
  id: z.string().describe("The `webhook-id` the receiver saw (the same on every retry)."),
  endpointId: z.string(),
  type: WebhookEventType,
  payload: WebhookPayload,
  status: WebhookDeliveryStatus.describe("`failed`: every retry was used up."),
  attempts: z.array(WebhookAttempt),
  nextAttemptAt: IsoTime.nullable().describe("When a pending delivery is tried next (while an attempt is in flight: until when that attempt holds it)."),
  lastError: z.string().nullable().describe("Why the last attempt failed, or why the delivery stopped (`the endpoint was deleted`)."),
  deliveredAt: IsoTime.nullable(),
  createdAt: IsoTime,
});
export const WebhookDeliveryQuery = z.object({
  endpoint: z.string().max(64).optional(),
  status: WebhookDeliveryStatus.optional(),
  type: WebhookEventType.optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(128).optional(),
});
export const WebhookDeliveryPage = Page(WebhookDelivery);
