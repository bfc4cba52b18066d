import { z } from "zod";
import { CostClass, Environment, IsoTime, Machine, Micros, Page, UserId } from "./common.js";

export const Plan = z.object({
  id: z.string(),
  slug: z.string(),
  name: z.string(),
  description: z.string().nullable(),
  priceMicros: Micros,
  currency: z.string(),
  period: z.enum(["month", "year"]),
  allowance: z.object({
    unit: z.enum(["runs", "tokens"]),
    limit: z.number().int().nullable().describe("Null: unlimited."),
  }),
  overage: z.boolean().describe("True: usage goes on past the allowance as overage; false: the plan stops at its allowance (402)."),
  spendCeilingMicros: Micros.nullable(),
  trialDays: z.number().int(),
  isDefault: z.boolean(),
});
export const PlanList = z.object({ data: z.array(Plan) });

export const User = z.object({
  id: UserId,
  email: z.string().nullable(),
  environment: Environment,
  plan: Plan.nullable(),
  subscription: z
    .object({ status: z.string(), trialEndsAt: IsoTime.nullable(), currentPeriodEnd: IsoTime.nullable() })
    .nullable(),
  allowance: z.object({
    unit: z.enum(["runs", "tokens"]),
    limit: z.number().int().nullable(),
    used: z.number().int(),
    remaining: z.number().int().nullable(),
  }),
  usage: z.object({
    period: z.string(),
    runs: z.number().int(),
    inputTokens: z.number().int(),
    outputTokens: z.number().int(),
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
  period: z.string().regex(/^\d{4}-\d{2}$/, "YYYY-MM").optional(),
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
  kind: z.string(),
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  amountMicros: Micros,
  period: z.string(),
  createdAt: IsoTime,
});
export const UsagePage = Page(UsageRow);
