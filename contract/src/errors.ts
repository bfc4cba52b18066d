import { z } from "zod";
import type { RunFailureReason } from "./runs.js";
import { Standing as StandingSchema } from "./common.js";

/**
 * The one table of error codes: each code has exactly one HTTP status and one type.
 * Every endpoint answers errors in the same envelope (`ErrorEnvelope`), and a code
 * means the same thing wherever it appears.
 */
export const ERROR_CODES = {
  // 400: the request itself is wrong
  invalid_request: { status: 400, type: "invalid_request_error", message: "The request is not valid." },
  invalid_json: { status: 400, type: "invalid_request_error", message: "The request body is not valid JSON." },
  // RFC 8628 token-poll answers (section 3.5): 400 with these codes
  authorization_pending: { status: 400, type: "device_flow_error", message: "The user has not answered yet; keep polling at the interval." },
  slow_down: { status: 400, type: "device_flow_error", message: "Polling too fast: the interval has been widened by 5 seconds." },
  access_denied: { status: 400, type: "device_flow_error", message: "The user denied the pairing." },
  expired_token: { status: 400, type: "device_flow_error", message: "The device code has expired; start pairing again." },
  invalid_grant: { status: 400, type: "device_flow_error", message: "The device code is unknown or has already been used." },
  invalid_signature: { status: 400, type: "invalid_request_error", message: "The webhook signature does not verify." },
  // Stripe Connect (attaching the app's Stripe account)
  invalid_state: { status: 400, type: "invalid_request_error", message: "The Stripe Connect state is unknown, already used or expired: start connecting again (POST /v1/billing/connect)." },
  connect_denied: { status: 400, type: "invalid_request_error", message: "The Stripe account's owner declined the connection." },
  connect_failed: { status: 400, type: "invalid_request_error", message: "Stripe refused the connection (an authorization code unknown, used or expired): start connecting again." },
  // 401: who is calling is not established
  missing_credential: { status: 401, type: "authentication_error", message: "This endpoint needs a credential." },
  invalid_credential: { status: 401, type: "authentication_error", message: "The credential is malformed or unknown." },
  revoked_credential: { status: 401, type: "authentication_error", message: "The credential has been revoked or has expired." },
  wrong_credential_kind: { status: 401, type: "authentication_error", message: "This endpoint takes a different kind of credential." },
  session_expired: { status: 401, type: "authentication_error", message: "The session has expired or has been ended." },
  // 402: the plan says no
  allowance_exhausted: { status: 402, type: "billing_error", message: "The user's plan allowance for this period is used up." },
  spend_ceiling_reached: { status: 402, type: "billing_error", message: "The user's spend ceiling is reached." },
  // 403: known caller, not allowed
  forbidden: { status: 403, type: "permission_error", message: "This credential may not do that." },
  // 404
  not_found: { status: 404, type: "not_found_error", message: "No such resource." },
  route_not_found: { status: 404, type: "not_found_error", message: "No such route." },
  // 405
  method_not_allowed: { status: 405, type: "invalid_request_error", message: "This method is not allowed on this path." },
  // 409: the state of things does not allow it
  serve_in_app: { status: 409, type: "routing_error", message: "The user has no reachable compute for this run: serve it in the app." },
  no_compute: { status: 409, type: "routing_error", message: "The user has no reachable compute for this run and the route does not allow `app`." },
  already_answered: { status: 409, type: "conflict_error", message: "This call has already been answered." },
  run_finished: { status: 409, type: "conflict_error", message: "The run has already finished." },
  run_active: { status: 409, type: "conflict_error", message: "The run is still active: a follow-up continues an ended run; wait for its end, or steer it with POST /v1/runs/:id/messages." },
  session_unavailable: { status: 409, type: "routing_error", message: "The agent CLI session this follow-up continues cannot be reached now; retry when its machine is online, or ask `onSessionLost: restart`." },
  conversation_unavailable: { status: 409, type: "conflict_error", message: "The service holds no conversation of that run to continue (the app served it itself)." },
  response_in_progress: { status: 409, type: "conflict_error", message: "The response is still in progress: wait for it to end." },
  idempotency_key_reused: { status: 409, type: "idempotency_error", message: "This Idempotency-Key was used with another request (method, path or body) in the last 24 hours." },
  idempotency_key_in_use: { status: 409, type: "idempotency_error", message: "A request with this Idempotency-Key is still being handled; retry after the time in Retry-After." },
  usage_already_reported: { status: 409, type: "conflict_error", message: "Usage for this run has already been reported." },
  plan_exists: { status: 409, type: "conflict_error", message: "A plan with this slug already exists." },
  plan_unavailable: { status: 409, type: "conflict_error", message: "This plan is archived or has no payment provider price." },
  account_in_use: { status: 409, type: "conflict_error", message: "This Stripe account is connected to another app." },
  billing_not_connected: { status: 409, type: "conflict_error", message: "The app has not connected a Stripe account for this environment." },
  already_subscribed: { status: 409, type: "conflict_error", message: "The user already has a live Stripe subscription: change plans in the customer portal (POST /v1/billing/portal)." },
  no_subscription: { status: 409, type: "conflict_error", message: "The user has no Stripe subscription to manage." },
  endpoint_disabled: { status: 409, type: "conflict_error", message: "The webhook endpoint was removed: nothing is sent to it any more." },
  last_owner: { status: 409, type: "conflict_error", message: "The app's last member with role `owner` cannot be removed." },
  portal_unavailable: { status: 409, type: "conflict_error", message: "Stripe refused to open the customer portal (is it configured in the app's Stripe account?)." },
  // 408: the request did not arrive in time (answered by the HTTP parser's guard)
  request_timeout: { status: 408, type: "invalid_request_error", message: "The request did not arrive in time." },
  // 410
  expired: { status: 410, type: "invalid_request_error", message: "This has expired." },
  connect_required: { status: 410, type: "invalid_request_error", message: "A Stripe account is attached only through Stripe Connect (POST /v1/billing/connect), never by its id." },
  // 417
  expectation_failed: { status: 417, type: "invalid_request_error", message: "The request's Expect header asks for what this server does not do." },
  // 413, 415
  payload_too_large: { status: 413, type: "invalid_request_error", message: "The request body is too large." },
  unsupported_media_type: { status: 415, type: "invalid_request_error", message: "The request body must be application/json." },
  // 431
  headers_too_large: { status: 431, type: "invalid_request_error", message: "The request's headers (or its URL) are too large." },
  // 429
  rate_limited: { status: 429, type: "rate_limit_error", message: "Too many requests; retry after the time in Retry-After." },
  compute_busy: { status: 429, type: "routing_error", message: "The user's machine that serves this is online but full (its runtimes at their cap and its queue at its bound), and the route allows nothing else; retry after the time in Retry-After." },
  // 5xx
  internal_error: { status: 500, type: "api_error", message: "Something went wrong on our side." },
  not_implemented: { status: 501, type: "api_error", message: "This endpoint is not built yet." },
  not_configured: { status: 501, type: "api_error", message: "This feature is not configured on this service: its operator must set it up; retrying will not help." },
  service_unavailable: { status: 503, type: "api_error", message: "The service is not available right now." },
  database_unavailable: { status: 503, type: "api_error", message: "The service's database is unreachable for a moment; retry after the time in Retry-After." },
  bus_unavailable: { status: 503, type: "api_error", message: "The service's run bus (NATS) is unreachable for a moment: runs go on and nothing is lost; retry after the time in Retry-After." },
} as const satisfies Record<string, { status: number; type: string; message: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;
export const errorCodes = Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]];

/** The status an error code is always answered with. */
export function statusOf(code: ErrorCode): number {
  return ERROR_CODES[code].status;
}

/**
 * The other code table: why a run stopped (`run_failed.error.code`, and the run's
 * `error.code`), each code with its stop reason (`run_failed.stopReason`) and its
 * default message. The service ends a run only with one of these codes; a code a
 * user's machine reports for its own failure (`api_error_<status>`, a runtime's
 * own error kind) is relayed as it came, with stop reason `runtime_error`.
 * On the wire both fields stay strings (a newer service may add codes).
 */
export const RUN_STOP_CODES = {
  // the run's own limits and deadlines
  max_turns: { stopReason: "max_turns", message: "The run reached its limit of model turns." },
  tool_result_timeout: { stopReason: "tool_result_timeout", message: "No result for a tool call in time." },
  approval_timeout: { stopReason: "approval_timeout", message: "No decision on an approval in time." },
  turn_timeout: { stopReason: "turn_timeout", message: "A model turn passed its deadline; it was stopped." },
  run_timeout: { stopReason: "run_timeout", message: "The agent run passed its deadline; it was stopped." },
  limit_exceeded: { stopReason: "limit_exceeded", message: "The machine passed one of this run's limits; the run was stopped." },
  machine_limit_exceeded: { stopReason: "limit_exceeded", message: "The service closed the link to the user's machine for passing one of its connection's limits; the run was stopped." },
  conversation_too_large: { stopReason: "conversation_too_large", message: "The conversation is too large for the link to the machine." },
  // the plan
  spend_ceiling_reached: { stopReason: "spend_ceiling", message: "The user's spend this period reached the plan's ceiling." },
  pause_expired: { stopReason: "pause_expired", message: "The run stayed paused at a limit (the plan's ceiling or allowance, or its budget) for longer than a pause is kept (RUN_PAUSE_MAX_SECONDS)." },
  // the machine or its link
  compute_busy: { stopReason: "compute_busy", message: "The run waited its queue deadline for a free slot on the user's machine and none came." },
  worker_lost: { stopReason: "worker_lost", message: "The link to the user's machine was lost; the run cannot go on." },
  worker_restarted: { stopReason: "worker_lost", message: "The worker on the user's machine was restarted while its agent CLI ran, and the CLI's session could not be resumed; the run cannot go on." },
  runtime_error: { stopReason: "runtime_error", message: "The user's runtime failed." },
  session_not_found: { stopReason: "session_lost", message: "The agent CLI session this follow-up continues is not on the user's machine any more (forgotten by its user, expired, or never kept there); the run did not start it afresh (onSessionLost: refuse)." },
  usage_limit_reached: { stopReason: "usage_limit_reached", message: "The agent CLI's subscription window on the user's machine is spent; the run was stopped. It can run again once the window resets." },
  // svc/echo's own runtime (its scripts)
  invalid_script: { stopReason: "runtime_error", message: "The svc/echo script is not valid." },
  script_failed: { stopReason: "runtime_error", message: "The svc/echo script failed the turn." },
  // the service itself
  internal_error: { stopReason: "internal_error", message: "The service failed while driving the run." },
  database_unavailable: { stopReason: "internal_error", message: "The service's database was unreachable for longer than a run waits for it; the run cannot go on." },
} as const satisfies Record<string, { stopReason: RunFailureReason; message: string }>;

export type RunStopCode = keyof typeof RUN_STOP_CODES;

/** The envelope `type` of a run's failure told as an error (a chat stream's last frame): a failure on the serving side, as for 5xx. */
export const RUN_STOP_ERROR_TYPE = ERROR_CODES.internal_error.type;

/** A 402's standing (`Standing` is typed by name: every route's error responses carry this envelope). */
const StandingField = StandingSchema.optional().describe(
  "On `allowance_exhausted` and `spend_ceiling_reached`: where the user stands against their plan, as `GET /v1/users/:id` says it.",
);

/**
 * The error envelope: `{"error":{"type","code","message","requestId"}}`.
 * `param` names the offending field where there is one; `interval` rides on
 * `slow_down` (the new poll interval, seconds).
 */
export const ErrorBody = z
  .object({
    type: z.string().describe("Broad class of the error, e.g. `authentication_error`."),
    code: z.enum(errorCodes).describe("Stable machine-readable code; see the code table."),
    message: z.string().describe("Human-readable explanation."),
    requestId: z.string().describe("The id of this request, also in the `Request-Id` header; quote it to support."),
    param: z.string().optional().describe("The request field at fault, when there is one."),
    interval: z.number().int().optional().describe("On `slow_down`: the new poll interval in seconds."),
    allowance: StandingField,
  })
  .describe("Error details.");

export const ErrorEnvelope = z.object({ error: ErrorBody }).describe("The error envelope every endpoint answers errors in.");
export type ErrorEnvelope = z.infer<typeof ErrorEnvelope>;

/**
 * Errors every endpoint can answer, whatever its credential. Every endpoint can also answer
 * `503 database_unavailable` with Retry-After; it is added to each operation in openapi.json
 * rather than here, which would grow the contract's types past what `tsc` can emit.
 */
export const COMMON_ERROR_STATUSES = [400, 404, 413, 415, 429, 500] as const;

/** Error statuses as contract responses, all in the one envelope. */
export function errorResponses<S extends number>(...statuses: S[]): { [K in S]: typeof ErrorEnvelope } {
  return Object.fromEntries(statuses.map((s) => [s, ErrorEnvelope])) as { [K in S]: typeof ErrorEnvelope };
}

/** Every router's options: each route answers in the envelope, and only with the statuses it lists (plus the common ones). */
export const ROUTER_OPTIONS = { strictStatusCodes: true, commonResponses: errorResponses(...COMMON_ERROR_STATUSES) } as const;
