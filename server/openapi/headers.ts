import type { Contract } from "@svc/contract";

type Json = Record<string, any>;

const ref = (name: string) => ({ $ref: `#/components/headers/${name}` });

/** Response headers, once in `components/headers`. */
export const HEADERS: Record<string, Json> = {
  RequestId: {
    description: "The id of this request (`req_...`), on every answer; also `requestId` in an error envelope. Quote it to support.",
    schema: { type: "string", example: "req_8d2k5m1q9x7c3v6b4n0z" },
  },
  XRequestId: {
    description: "The same id as `Request-Id`, under the name many proxies and tracing tools read.",
    schema: { type: "string", example: "req_8d2k5m1q9x7c3v6b4n0z" },
  },
  ServiceRunId: {
    description: "The run's id (`run_...`), sent before the first byte of the body: re-attach with `GET /v1/runs/{id}/events`, read it with `GET /v1/runs/{id}`.",
    schema: { type: "string", example: "run_7q2m9x4k1c8v5n3b6z0w2e4r" },
  },
  RetryAfter: {
    description: "Seconds to wait before trying again.",
    schema: { type: "integer", minimum: 0, example: 2 },
  },
  ServiceNothingCreated: {
    description: "`true` when the request created and changed nothing (it sent no statement to the database), so even a call that creates something may be sent again.",
    schema: { type: "string", enum: ["true"] },
  },
  WWWAuthenticate: {
    description: "`Bearer`, on every 401.",
    schema: { type: "string", example: "Bearer" },
  },
};

/** Request parameters, once in `components/parameters`. */
export const PARAMETERS: Record<string, Json> = {
  IdempotencyKey: {
    name: "Idempotency-Key",
    in: "header",
    required: false,
    description:
      "Makes a POST safe to send again (Stripe's semantics). The first answer to a key is kept for 24 hours: the same key with the same body within that time gets that first answer again (status, headers and body) instead of doing the work twice; the same key with a different body is `409 idempotency_key_reused`. Use a fresh random value (a UUID v4) per operation, and the same one for its retries. Keys are per app and environment.",
    schema: { type: "string", minLength: 1, maxLength: 255, example: "5b0f7a62-3c1e-4f0e-9d55-2a8c6f1e9b37" },
  },
};

/** Routes whose run id comes back in `Service-Run-Id`, and on which of their answers. */
const SERVICE_RUN_ID: Partial<Record<keyof Contract, Record<string, string>>> = {
  createRun: { "200": "", "409": "On `serve_in_app`: the run handed back to the app (it is counted); report its usage to `POST /v1/runs/{id}/usage`." },
  createChatCompletion: { "200": "", "409": "On `serve_in_app`: the completion handed back to the app (it is counted); report its usage to `POST /v1/runs/{id}/usage`." },
  createResponse: { "200": "", "409": "On `serve_in_app`: the response handed back to the app (it is counted); report its usage to `POST /v1/runs/{id}/usage`." },
};

/** This answer of this route has a header the same status of other routes has not. */
export const hasOwnHeaders = (route: keyof Contract, status: string) => SERVICE_RUN_ID[route]?.[status] !== undefined;

/** The headers of one answer of one route. */
export function responseHeaders(route: keyof Contract, status: string): Json {
  const headers: Json = { "Request-Id": ref("RequestId"), "x-request-id": ref("XRequestId") };
  const runId = SERVICE_RUN_ID[route]?.[status];
  if (runId !== undefined) headers["Service-Run-Id"] = runId ? { ...HEADERS.ServiceRunId, description: runId } : ref("ServiceRunId");
  if (status === "401") headers["WWW-Authenticate"] = ref("WWWAuthenticate");
  if (status === "429" || status === "503") headers["Retry-After"] = ref("RetryAfter");
  if (status === "503") headers["Service-Nothing-Created"] = ref("ServiceNothingCreated");
  return headers;
}
