/**
 * Type-level proof that the plain types of `wire.ts` (what the published SDK
 * declares) are the contract's: each pair must be assignable both ways, so a
 * change to a schema that the SDK's types do not follow fails `tsc`
 * (`npm run typecheck`). Never imported: not part of the package.
 */
import type { z } from "zod";
import type * as C from "@svc/contract";
import type * as W from "./wire.js";

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** Fails to compile unless `T` is `true`. */
function same<T extends true>(): T {
  return true as T;
}
/** What the SDK sends must be accepted by the schema. */
type Accepted<Mine, S extends z.ZodTypeAny> = [Mine] extends [z.input<S>] ? true : false;

export const checks = [
  same<Same<W.ErrorCode, C.ErrorCode>>(),
  same<Same<W.ErrorEnvelope, z.infer<typeof C.ErrorEnvelope>>>(),
  same<Same<W.Environment, z.infer<typeof C.Environment>>>(),
  same<Same<W.CostClass, z.infer<typeof C.CostClass>>>(),
  same<Same<W.RouteKind, z.infer<typeof C.RouteKind>>>(),
  same<Same<W.RunRoute, z.infer<typeof C.RunRoute>>>(),
  same<Same<W.RuntimeKind, C.RuntimeKind>>(),
  same<Same<W.RuntimeBilling, C.RuntimeBilling>>(),
  same<Same<W.RuntimeUnavailable, C.RuntimeUnavailable>>(),
  same<Same<W.Runtime, z.infer<typeof C.Runtime>>>(),
  same<Same<W.UsageWindow, C.UsageWindow>>(),
  same<Same<W.RuntimeLimits, C.RuntimeLimits>>(),
  same<Same<W.Machine, z.infer<typeof C.Machine>>>(),
  same<Same<W.Plan, z.infer<typeof C.Plan>>>(),
  same<Same<W.PlanList, z.infer<typeof C.PlanList>>>(),
  same<Same<W.User, z.infer<typeof C.User>>>(),
  same<Same<W.Standing, C.Standing>>(),
  same<Same<W.Compute, z.infer<typeof C.Compute>>>(),
  same<Same<W.UsageRow, z.infer<typeof C.UsageRow>>>(),
  same<Same<W.PageBody<W.UsageRow>, z.infer<typeof C.UsagePage>>>(),
  same<Same<Required<W.UsageListParams>, Required<z.input<typeof C.UsageQuery>>>>(),
  same<Same<W.PlanCreateParams, z.input<typeof C.PlanInput>>>(),
  same<Same<W.PlanUpdateParams, z.input<typeof C.PlanUpdate>>>(),
  same<Same<W.SessionCreateParams, z.input<typeof C.CreateSessionRequest>>>(),
  same<Same<W.Session, z.infer<typeof C.SessionResponse>>>(),
  same<Same<W.SessionsEnded, z.infer<typeof C.EndSessionsResponse>>>(),
  same<Same<W.MachineRemoved, z.infer<typeof C.MachineRemoved>>>(),
  same<Same<W.RunUsageTotals, C.TokenUsage>>(),
  same<Same<W.RunEvent, C.RunEvent>>(),
  same<Same<W.RunEvent["kind"], (typeof C.RUN_EVENT_KINDS)[number]>>(),
  same<Same<W.Run, C.Run>>(),
  same<Same<W.RunStatus, C.RunStatus>>(),
  same<Same<W.RunLimits, NonNullable<C.CreateRunRequest["limits"]>>>(),
  same<Same<W.OnSessionLost, C.OnSessionLost>>(),
  same<Same<W.RunCreateBody, z.input<typeof C.CreateRunRequest>>>(),
  same<Same<W.MessageDelivery, z.infer<typeof C.MessageDelivery>>>(),
  same<Same<W.RunMessageParams, z.input<typeof C.RunMessageRequest>>>(),
  same<Same<W.RunMessageResponse, z.infer<typeof C.RunMessageResponse>>>(),
  same<Same<W.CancelRunResponse, z.infer<typeof C.CancelResponse>>>(),
  same<Same<W.RunUsageReport, z.input<typeof C.RunUsage>>>(),
  same<Same<W.RunUsageResponse, z.infer<typeof C.RunUsageResponse>>>(),
  same<Accepted<W.ChatCompletionCreateParams, typeof C.ChatCompletionRequest>>(),
  same<Same<W.FinishReason, C.FinishReason>>(),
  same<Same<W.ChatCompletion, z.infer<typeof C.ChatCompletion>>>(),
  same<Same<W.ChatCompletionChunk, z.infer<typeof C.ChatCompletionChunk>>>(),
  same<Accepted<W.ResponseCreateParams, typeof C.CreateResponseRequest>>(),
  same<Same<W.ResponseObject, z.infer<typeof C.ResponseObject>>>(),
  same<Same<W.ResponseOutputItem, z.infer<typeof C.ResponseOutputItem>>>(),
  same<Same<W.ResponseStreamEvent, z.infer<typeof C.ResponseStreamEvent>>>(),
  same<Same<W.ResponseDeleted, z.infer<typeof C.ResponseDeleted>>>(),
  same<Same<W.ResponseInputItemList, z.infer<typeof C.ResponseInputItemList>>>(),
  same<Same<Required<W.ResponseInputItemsParams>, Required<Omit<z.input<typeof C.ResponseInputItemsQuery>, "include">>>>(),
  same<Same<W.ModelList, z.infer<typeof C.ModelList>>>(),
  same<Same<W.BillingAccount, z.infer<typeof C.BillingAccount>>>(),
  same<Same<W.BillingConnectParams, z.input<typeof C.ConnectRequest>>>(),
  same<Same<W.BillingConnectStart, z.infer<typeof C.ConnectStart>>>(),
  same<Same<W.WebhookEventType, C.WebhookEventType>>(),
  same<Same<W.WebhookEndpointCreateParams, z.input<typeof C.CreateWebhookEndpoint>>>(),
  same<Same<W.WebhookEndpoint, z.infer<typeof C.WebhookEndpoint>>>(),
  same<Same<W.CreatedWebhookEndpoint, z.infer<typeof C.CreatedWebhookEndpoint>>>(),
  same<Same<W.PageBody<W.WebhookDelivery>, z.infer<typeof C.WebhookDeliveryPage>>>(),
  same<Same<Required<W.WebhookDeliveryListParams>, Required<z.input<typeof C.WebhookDeliveryQuery>>>>(),
];
