import { z } from "zod";
import { CostClass, Environment, IsoTime, Machine, Micros, Page, RouteKind, UserId } from "./common.js";
import { Plan, User, UsageRow } from "./reads.js";
import { Run, RunStatus } from "./runs.js";
import { ResponseInputItemStored, ResponseOutputItem } from "./responses.js";
import { PlanSlugParam } from "./billing.js";

/**
 * The app owner's side (the dashboard): owner accounts, their apps and members, keys,
 * and per environment the reads and actions an owner needs. The credential is the
 * owner's session cookie (`svc_owner`, HttpOnly, SameSite=Strict) plus, on every
 * request that changes something, the `X-CSRF-Token` header from `GET /v1/owner/me`.
 */
export const OWNER_SESSION_COOKIE = "svc_owner";
export const OWNER_CSRF_HEADER = "x-csrf-token";
export const OWNER_SESSION_PREFIX = "ost_";
export const OWNER_SIGN_IN_LINK_PREFIX = "olt_";
export const OWNER_INVITE_PREFIX = "oin_";

export const Email = z.string().trim().toLowerCase().email().max(254);
export const Password = z.string().min(10, "at least 10 characters").max(256);
export const MemberRole = z.enum(["owner", "member"]).describe("`owner`: may invite and remove members and manage keys; `member`: everything else.");
export type MemberRole = z.infer<typeof MemberRole>;

export const Owner = z.object({
  id: z.string(),
  email: Email,
  name: z.string().nullable(),
  hasPassword: z.boolean().describe("False for an account made by a sign-in link that has not set a password yet."),
  createdAt: IsoTime,
});

export const OwnerApp = z.object({
  id: z.string(),
  name: z.string(),
  role: MemberRole,
  createdAt: IsoTime,
});

export const OwnerMe = z.object({
  owner: Owner,
  csrfToken: z.string().describe("Send it as `X-CSRF-Token` on every owner request that is not a GET."),
  sessionExpiresAt: IsoTime,
  apps: z.array(OwnerApp),
});

export const SignInRequest = z.object({ email: Email, password: z.string().min(1).max(256) });
export const SignInLinkRequest = z.object({ token: z.string().min(1).max(128).describe("The `olt_...` token from a one-time sign-in link.") });
export const AcceptInviteRequest = z.object({
  token: z.string().min(1).max(128).describe("The `oin_...` token from an invitation link."),
  email: Email,
  name: z.string().trim().min(1).max(200).optional(),
  password: Password.optional().describe("Required when no account has this email yet; an existing account proves itself with its own password."),
});
export const SetPasswordRequest = z.object({
  currentPassword: z.string().max(256).optional().describe("Required when the account has a password already."),
  newPassword: Password,
});
export const SignedOut = z.object({ signedOut: z.number().int().describe("How many sessions were ended.") });

export const AppParam = z.object({ app: z.string().min(1).max(64) });
export const EnvParam = AppParam.extend({ env: Environment });
export const CreateAppRequest = z.object({ name: z.string().trim().min(1).max(200) });

export const KeyKind = z.enum(["app", "connect"]).describe("`app`: the secret `sk_svc_` key of the app's server; `connect`: the public `pk_svc_` key of its pages.");
export type KeyKind = z.infer<typeof KeyKind>;
export const OwnerKey = z.object({
  id: z.string(),
  kind: KeyKind,
  environment: Environment,
  display: z.string().describe("Enough to recognise the key, never its secret: `sk_svc_<id>.…` or the whole public `pk_svc_` key."),
  createdAt: IsoTime,
  expiresAt: IsoTime.nullable().describe("Set when the key was rotated: it keeps working until then (the grace period)."),
  revokedAt: IsoTime.nullable(),
  lastUsedAt: IsoTime.nullable(),
  name: z.string().nullable().describe("What the app's members call it (`production server`); a rotation's new key keeps it."),
  createdBy: z
    .object({ id: z.string(), email: z.string().nullable(), name: z.string().nullable() })
    .nullable()
    .describe("The member who made it in the dashboard (or rotated the key it replaces); null: made with the `svc` CLI or when the app was first created."),
});
export const OwnerKeyList = z.object({ data: z.array(OwnerKey) });
export const CreatedKey = OwnerKey.extend({ secret: z.string().describe("The whole key, shown this once: it is stored only as a hash.") });
export const KeyName = z.string().trim().min(1).max(100).describe("What the app's members call the key, e.g. `production server`.");
export const CreateKeyRequest = z.object({ environment: Environment, kind: KeyKind.default("app"), name: KeyName.optional() });
export const RenameKeyRequest = z.object({ name: KeyName.nullable().describe("The new name; null clears it.") });
export const KeyParam = AppParam.extend({ keyId: z.string().min(1).max(64) });
export const RotateKeyRequest = z.object({
  graceSeconds: z.number().int().min(0).max(30 * 86_400).default(86_400).describe("How long the old key keeps working (0: at once)."),
});
export const RotatedKey = z.object({ previous: OwnerKey, key: CreatedKey });
export const CreatedApp = z.object({ app: OwnerApp, keys: z.array(CreatedKey).describe("The test environment's app and connect keys, shown once.") });

export const Member = z.object({ owner: Owner.pick({ id: true, email: true, name: true }), role: MemberRole, joinedAt: IsoTime });
export const MemberList = z.object({ data: z.array(Member), invites: z.array(z.object({ id: z.string(), email: z.string().nullable(), role: MemberRole, expiresAt: IsoTime, createdAt: IsoTime })) });
export const InviteRequest = z.object({ email: Email.optional().describe("When given, only this email may accept."), role: MemberRole.default("member") });
export const Invite = z.object({ id: z.string(), url: z.string().describe("The link to send, shown once; it holds the single-use token."), email: z.string().nullable(), role: MemberRole, expiresAt: IsoTime });
export const MemberParam = AppParam.extend({ ownerId: z.string().min(1).max(64) });

export const OwnerUserQuery = z.object({
  q: z.string().max(256).optional().describe("Matches the user's id or email (part of either, case-insensitive)."),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(128).optional(),
});
export const OwnerUserRow = z.object({
  id: UserId,
  email: z.string().nullable(),
  plan: z.object({ slug: z.string(), name: z.string() }).nullable(),
  subscriptionStatus: z.string().nullable(),
  allowance: User.shape.allowance,
  runs: z.number().int().describe("Runs this period."),
  amountMicros: Micros.describe("Spend this period."),
  currency: z.string(),
  machines: z.number().int(),
  online: z.number().int(),
  lastRunAt: IsoTime.nullable(),
  createdAt: IsoTime,
});
export const OwnerUserPage = Page(OwnerUserRow);
export const OwnerUserParam = EnvParam.extend({ user: UserId });
export const OwnerSession = z.object({ id: z.string(), createdAt: IsoTime, expiresAt: IsoTime, endedAt: IsoTime.nullable(), live: z.boolean() });
export const OwnerUserDetail = z.object({ user: User, currency: z.string(), machines: z.array(Machine), sessions: z.array(OwnerSession) });
export const OwnerMachineParam = OwnerUserParam.extend({ machineId: z.string().min(1).max(64) });

const Day = z.string().regex(/^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/, "a day, YYYY-MM-DD");
export const RangeQuery = z.object({
  from: Day.optional().describe("First day (UTC), default 29 days before `to`."),
  to: Day.optional().describe("Last day (UTC), inclusive; default today."),
});
export const Totals = z.object({
  runs: z.number().int(),
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  cacheReadTokens: z.number().int(),
  cacheWriteTokens: z.number().int(),
  amountMicros: Micros,
});
export const UsageSummary = z.object({
  from: z.string(),
  to: z.string(),
  currency: z.string().describe("The currency of the environment's default plan (amounts are in it)."),
  days: z.array(Totals.extend({ day: z.string(), costClass: CostClass })).describe("One entry per day and cost class that has usage."),
  byCostClass: z.array(Totals.extend({ costClass: CostClass })),
  totals: Totals,
  topUsers: z.array(Totals.extend({ user: UserId })).describe("The ten users with the most spend, then runs."),
});

export const OwnerRunQuery = z.object({
  user: UserId.optional(),
  status: RunStatus.optional(),
  route: RouteKind.optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(128).optional(),
});
export const OwnerRunPage = Page(Run);
export const OwnerRunParam = EnvParam.extend({ id: z.string().min(1).max(64) });
export const StoredRunEvent = z.object({
  seq: z.number().int(),
  kind: z.string(),
  data: z.record(z.unknown()),
  at: IsoTime,
});
export const OwnerApproval = z.object({
  callId: z.string(),
  tool: z.string(),
  decision: z.enum(["approved", "denied", "withdrawn"]).nullable().describe("Null: not decided yet."),
  decidedBy: z.string().nullable().describe("Who decided: `app`, `machine` (the end user on their machine), `policy`, or the answering user's id."),
  reason: z.string().nullable(),
  askedAt: IsoTime,
  decidedAt: IsoTime.nullable(),
});
/** The most of one tool call's arguments, or of the app's answer to it, that the run inspector returns (bytes of JSON text): the rest is cut. */
export const MAX_INSPECTED_PAYLOAD_BYTES = 65_536;
/** The tool calls one inspection returns at most (the first ones). */
export const MAX_INSPECTED_TOOL_CALLS = 500;
export const OwnerToolCall = z.object({
  callId: z.string(),
  name: z.string().describe("The app's tool the model called."),
  arguments: z.string().describe("The arguments as JSON text, cut at 64 KiB (`argumentsTruncated`)."),
  argumentsTruncated: z.boolean(),
  result: z.string().nullable().describe("The app's answer as JSON text, cut at 64 KiB (`resultTruncated`; `resultBytes` is its whole size). Null: not answered."),
  resultBytes: z.number().int().nullable().describe("The whole answer's size in bytes of JSON text. Null: not answered."),
  resultTruncated: z.boolean(),
  isError: z.boolean().nullable().describe("True: the app answered with `isError` (its tool failed). Null: not answered."),
  calledAt: IsoTime,
  answeredAt: IsoTime.nullable().describe("When the app answered. Null: not answered (the run waits for it while it lives)."),
});
/** The runs continuing one run (`previousRunId` naming it) that one inspection returns at most (the oldest ones). */
export const MAX_INSPECTED_CONTINUATIONS = 20;
export const OwnerRunContinuation = z.object({
  id: z.string(),
  status: RunStatus,
  createdAt: IsoTime,
});
export const OwnerRunDetail = z.object({
  run: Run,
  previousRunId: z
    .string()
    .nullable()
    .describe("The run whose conversation this one continues (the follow-up's `previousRunId`, as `run.previousRunId`); null: it starts one."),
  continuedBy: z
    .array(OwnerRunContinuation)
    .describe("The runs that continue this one's conversation (their `previousRunId` is this run), of the same app and environment only: oldest first, at most 20."),
  events: z.array(StoredRunEvent),
  approvals: z.array(OwnerApproval),
  toolCalls: z.array(OwnerToolCall).describe("The calls of the app's tools, in the order they were made (the first 500), each with the app's answer."),
  ledger: z.array(UsageRow),
  machine: Machine.nullable(),
  reportedUsage: z
    .object({ inputTokens: z.number().int(), outputTokens: z.number().int(), reportedAt: IsoTime })
    .nullable()
    .describe("A handed-back run: the usage the app reported for it."),
  response: z
    .object({
      id: z.string(),
      instructions: z.string().nullable(),
      previousResponseId: z.string().nullable(),
      store: z.boolean(),
      deleted: z.boolean(),
      input: z.array(ResponseInputItemStored).describe("The request's own input items (empty when not stored, or deleted)."),
      output: z.array(ResponseOutputItem).nullable().describe("What it answered, when known without its events (`svc/echo`); else its events say it."),
    })
    .nullable()
    .describe("A run started by `POST /v1/responses`: the response's items."),
});

/** A signal that may lead a user to upgrade: a run paused at a limit, or an alert threshold reached. */
export const UpgradeSignalKind = z.enum(["paused", "threshold"]);
export type UpgradeSignalKind = z.infer<typeof UpgradeSignalKind>;

export const ConversionCounts = z.object({ trialsStarted: z.number().int(), converted: z.number().int(), cancelled: z.number().int() });
export const Conversions = z.object({
  from: z.string(),
  to: z.string(),
  perPlan: z.array(ConversionCounts.extend({ plan: Plan.pick({ slug: true, name: true }) })),
  series: z.array(ConversionCounts.extend({ day: z.string() })),
  payments: z.array(
    z.object({
      id: z.string(),
      user: UserId,
      plan: z.string().nullable(),
      amountMicros: Micros,
      currency: z.string(),
      paidAt: IsoTime,
      trialStartedAt: IsoTime.nullable().describe("The trial that led to this payment, if one did."),
    }),
  ),
  signals: z
    .object({
      pauses: z.number().int().describe("Runs paused at a limit in the range."),
      thresholds: z.number().int().describe("Alert thresholds users reached in the range (each once per user, window and threshold)."),
      upgraded: z.number().int().describe("Users who got a plan (a subscription, bought or set by the app) within 7 days after one of those signals."),
      recent: z
        .array(
          z.object({
            at: IsoTime,
            user: UserId,
            kind: UpgradeSignalKind,
            detail: z.string().describe("`80% of allowance`, `100% of spend`, or the limit a run paused at (`spend_ceiling`, `allowance`, `run_budget`)."),
            runId: z.string().nullable(),
            upgradedTo: z.string().nullable().describe("The plan the user got within 7 days after, if they did."),
            upgradedAt: IsoTime.nullable(),
          }),
        )
        .describe("The newest signals of the range (at most 100)."),
    })
    .describe("What users met of their plans (runs paused at a limit, alert thresholds reached) and the upgrades that followed."),
});

export const OwnerPlanParam = EnvParam.extend({ slug: PlanSlugParam.shape.slug });
export const OwnerWebhookParam = EnvParam.extend({ id: z.string().min(1).max(64) });
export const WebhookTestResult = z.object({ deliveryId: z.string().describe("The delivery queued to the endpoint: follow it in the delivery log.") });
