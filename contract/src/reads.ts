import { z } from "zod";
import { CostClass, Environment, IsoTime, Machine, Micros, Page, Standing, UserId } from "./common.js";

export const PlanPeriod = z.enum(["month", "year"]);
export type PlanPeriod = z.infer<typeof PlanPeriod>;
export const AllowanceUnit = z.enum(["runs", "tokens"]);
export type AllowanceUnit = z.infer<typeof AllowanceUnit>;

export const Plan = z.object({
  id: z.string(),
  slug: z.string(),
  name: z.string(),
  description: z.string().nullable(),
  priceMicros: Micros,
  currency: z.string(),
  period: PlanPeriod,
  allowance: z.object({
    unit: AllowanceUnit,
    limit: z.number().int().nullable().describe("Null: unlimited."),
  }),
  overage: z.boolean().describe("True: usage goes on past the allowance as overage; false: the plan stops at its allowance (402)."),
  overagePriceMicros: Micros.nullable().describe("With `overage`: what each unit past the allowance costs (a run, or 1,000 tokens)."),
  spendCeilingMicros: Micros.nullable().describe("No run starts, and a run pauses between turns (`run_paused`), once the user's spend this period reaches it."),
  alertThresholds: z
    .array(z.number().int())
    .describe("Percentages of the allowance (of the spend ceiling when the allowance is unlimited) at which `allowance.threshold` is sent, once per user and window."),
  trialDays: z.number().int(),
  stripePriceId: z.string().nullable().describe("The price in the app's connected Stripe account; null: not sold through checkout."),
  isDefault: z.boolean().describe("Users without a subscription are on the default plan."),
  archived: z.boolean().describe("Archived plans are not sold any more; their subscribers keep them."),
});
export const PlanList = z.object({ data: z.array(Plan) });
export const PlanListQuery = z.object({
  archived: z.enum(["true", "false"]).optional().describe("`true`: archived plans too."),
});

export const User = z.object({
  id: UserId,
  email: z.string().nullable(),
  environment: Environment,
  plan: Plan.nullable(),
  subscription: z
    .object({
      status: z.string().describe("`active`, `trialing`, `past_due`, `canceled` ..."),
      source: z.enum(["stripe", "app"]).describe("`stripe`: bought through checkout; `app`: set by the app (PUT /v1/users/:id/plan)."),
      trialEndsAt: IsoTime.nullable(),
      currentPeriodEnd: IsoTime.nullable(),
    })
    .nullable(),
  allowance: Standing,
  usage: z.object({
    period: z.string(),
    runs: z.number().int(),
    inputTokens: z.number().int(),
    outputTokens: z.number().int(),
    cacheReadTokens: z.number().int().describe("Prompt-cache reads this period; a tokens plan counts input, cache reads, cache writes and output."),
    cacheWriteTokens: z.number().int(),
    amountMicros: Micros,
  }),
  connected: z.object({
    machines: z.number().int(),
    online: z.number().int(),
    runtimes: z.array(z.string()),
  }),
  createdAt: IsoTime,
});

export const Compute = z.object({ user: UserId, machines: z.array(Machine) });

export const UsageQuery = z.object({
  user: UserId.optional(),
  run: z.string().max(64).optional().describe("Only this run's rows."),
  costClass: CostClass.optional(),
  period: z
    .string()
    .regex(/^\d{4}-(0[1-9]|1[0-2])$/, "a calendar month, YYYY-MM (01 to 12)")
    .optional()
    .describe("A calendar month, `YYYY-MM`: `2026-13` is refused (400), not an empty list."),
  environment: Environment.optional().describe("Must be the app key's own environment when given."),
  limit: z.coerce.number().int().min(1).max(500).default(100),
  cursor: z.string().max(128).optional(),
});

export const UsageRow = z.object({
  id: z.string(),
  user: UserId,
  environment: Environment,
  runId: z.string().nullable(),
  costClass: CostClass,
  kind: z.string().describe("`run` (counted at its start), `tokens` (a turn on the user's compute), `app_usage` (reported by the app), `echo`."),
  inputTokens: z.number().int().describe("Input tokens, not counting those read from or written to a prompt cache."),
  outputTokens: z.number().int(),
  cacheReadTokens: z.number().int().describe("Input tokens read from the provider's prompt cache (agent CLIs report them)."),
  cacheWriteTokens: z.number().int().describe("Input tokens written to the provider's prompt cache."),
  amountMicros: Micros,
  period: z.string(),
  createdAt: IsoTime,
});
export const UsagePage = Page(UsageRow);
