import { STATUS_CODES } from "node:http";
import { generateOpenApi } from "@ts-rest/open-api";
import type { AppRoute } from "@ts-rest/core";
import type { z } from "zod";
import { ChatCompletionStreamFrame, contract, ERROR_CODES, ErrorEnvelope, RUN_EVENT_KINDS, SECURITY_SCHEMES, type Contract, type RouteMetadata } from "@svc/contract";
import { fixNullableDeep, SchemaRegistry } from "./openapi/components.js";
import { hasOwnHeaders, HEADERS, PARAMETERS, responseHeaders } from "./openapi/headers.js";
import { ROUTE_TAGS, TAGS } from "./openapi/tags.js";
import { toOpenApi31 } from "./openapi/openapi-3-1.js";

type Json = Record<string, any>;

const SECURITY_BY_AUTH: Record<RouteMetadata["auth"], Record<string, string[]>[]> = {
  appKey: [{ appKey: [] }],
  session: [{ sessionToken: [] }],
  owner: [{ ownerSession: [] }],
  connectKey: [],
  none: [],
};

const codeTable = [
  "| code | status | type |",
  "| --- | --- | --- |",
  ...Object.entries(ERROR_CODES).map(([code, e]) => `| \`${code}\` | ${e.status} | \`${e.type}\` |`),
].join("\n");

const description = `Routes an app's agent runs to compute its end users own, runs the agent loop and meters every run per user.

**Base URL** ends in \`/v1\`; the pairing paths \`/c/{pk}/v1/...\` are on the same host.

**Errors** always come in one envelope (\`Error\`), \`{"error":{"type","code","message","requestId"}}\`, and a code always has the same status:

${codeTable}

**Credentials**: app key (\`sk_svc_<id>.<secret>\`) on the app endpoints; no credential on the pairing endpoints (the connect key \`pk_svc_...\` is in the path); the end-user session (\`est_...\`) on the browser endpoints; the pairing token (\`pt_svc_...\`) only on the worker connection. Each endpoint takes exactly its one credential.

**Headers**: every answer carries the request id in \`Request-Id\` (and \`x-request-id\`); a run start and a chat completion carry the run's id in \`Service-Run-Id\`; \`429\` and \`503\` carry \`Retry-After\` (seconds). Every POST takes an optional \`Idempotency-Key\`.

**Run events** (\`text/event-stream\` of \`POST /v1/runs\` and \`GET /v1/runs/{id}/events\`): each frame has \`id:\` (sequence, for \`Last-Event-ID\`), \`event:\` (kind) and JSON \`data:\` (\`RunEvent\`); kinds: ${RUN_EVENT_KINDS.map((k) => `\`${k}\``).join(", ")}. A run's stream ends after its final event (\`run_completed\`, \`run_failed\` or \`run_cancelled\`).`;

/** What an error status means here, with the codes answered with it. */
function errorDescription(status: string): string {
  const codes = Object.entries(ERROR_CODES)
    .filter(([, e]) => String(e.status) === status)
    .map(([code]) => `\`${code}\``);
  // Documented ahead of the server (the Idempotency-Key parameter); listed once it is in ERROR_CODES.
  if (status === "409" && !("idempotency_key_reused" in ERROR_CODES)) codes.push("`idempotency_key_reused` (a POST whose `Idempotency-Key` came before with another body)");
  const what = `${STATUS_CODES[Number(status)] ?? status}: an \`Error\`; its code is one of ${codes.join(", ")}.`;
  return status === "503" ? `${what} Retry after \`Retry-After\` seconds.` : what;
}

/** `409` → `Conflict`. */
const errorResponseName = (status: string) => (STATUS_CODES[Number(status)] ?? `Status ${status}`).replace(/[^A-Za-z0-9]/g, "");

const RUN_EVENT_STREAM =
  "A `text/event-stream` of run events. Each frame has `id:` (the event's sequence, for `Last-Event-ID`), `event:` (its kind) and `data:` (one JSON `RunEvent`), e.g.\n\n" +
  "```\nid: 1\nevent: run_started\ndata: {\"kind\":\"run_started\",\"runId\":\"run_7q2m9x4k1c8v5n3b6z0w2e4r\",\"route\":\"user-hardware\",\"costClass\":\"user_hardware\",\"machineId\":\"mch_3f8k2q9m5x1c7v4b6n0z\",\"runtime\":\"ollama\",\"model\":\"llama3.1:8b\"}\n\n" +
  "id: 2\nevent: text_delta\ndata: {\"kind\":\"text_delta\",\"turn\":1,\"text\":\"Two of them\"}\n```\n\n" +
  "Lines starting with `:` are comments (heartbeats). The stream ends after the run's final event.";

const CHAT_ANSWER =
  "A `ChatCompletion` (`application/json`); with `stream: true`, a `text/event-stream` of `data:` frames, each one JSON `ChatCompletionChunk`, ending with `data: [DONE]` (a failure after streaming began is a final `data: {\"error\": {...}}` frame instead).";

const RESPONSE_ANSWER =
  "A `Response` (`application/json`); with `stream: true`, a `text/event-stream` of the Open Responses events: each frame's `event:` is the event's `type` and its `data:` one JSON `ResponseStreamEvent` (`sequence_number` from 0), from `response.created` to one of `response.completed`, `response.incomplete` or `response.failed`, then `data: [DONE]`.";

/** The content type of a contract's `otherResponse` (a stream, a download), if `r` is one. */
const otherContentType = (r: unknown) => (r && typeof r === "object" && "contentType" in r ? (r as { contentType: string }).contentType : undefined);
const isEventStream = (r: unknown) => otherContentType(r) === "text/event-stream";

/** What an answer that is a download says of itself. */
const DOWNLOADS: Record<string, string> = {
  "text/csv": "A CSV file (RFC 4180, UTF-8, a header row first), sent as an attachment (`Content-Disposition`).",
};

/** The OpenAPI 3.1 document of the contract (built as 3.0 by @ts-rest/open-api, then `toOpenApi31`); `openapi.json` is this, committed. */
export function buildOpenApi() {
  const registry = new SchemaRegistry();
  /** `components/responses`: each error status as every operation answers it, by status. */
  const sharedErrors = new Map<string, Json>();
  /** An error answer: a `$ref` to the shared one, or its own where the route adds a header (`Service-Run-Id` on a handback). */
  const errorResponse = (route: keyof Contract, status: string): Json => {
    const response = { description: errorDescription(status), headers: responseHeaders(route, status), content: { "application/json": { schema: registry.ref("Error") } } };
    if (hasOwnHeaders(route, status)) return response;
    sharedErrors.set(status, response);
    return { $ref: `#/components/responses/${errorResponseName(status)}` };
  };
  const schemaOf = (zod: unknown, generated: Json | undefined): Json | undefined => {
    const name = registry.nameOf(zod);
    if (name) return registry.ref(name);
    return generated ? registry.refify(generated) : undefined;
  };

  const doc = generateOpenApi(
    contract,
    {
      info: { title: "svc API", version: "1.0.0", description },
      servers: [{ url: "/", description: "This server" }],
      tags: TAGS.map((t) => ({ ...t })),
    },
    {
      setOperationId: true,
      operationMapper: (operation, appRoute: AppRoute) => {
        const name = operation.operationId as keyof Contract;
        const meta = appRoute.metadata as RouteMetadata;
        const isPost = appRoute.method === "POST";

        const parameters: Json[] = (operation.parameters ?? []).map((p: Json) => (p.schema ? { ...p, schema: fixNullableDeep(p.schema) } : p));
        if (isPost) parameters.push({ $ref: "#/components/parameters/IdempotencyKey" });

        let requestBody: Json | undefined;
        if (operation.requestBody && "body" in appRoute) {
          const [contentType, media] = Object.entries((operation.requestBody as Json).content)[0] as [string, Json];
          requestBody = {
            required: !(appRoute.body as z.ZodTypeAny).isOptional(),
            content: { [contentType]: { schema: schemaOf(appRoute.body, media.schema) } },
          };
        }

        const responses: Json = {};
        for (const [status, response] of Object.entries(appRoute.responses)) {
          const generated = (operation.responses as Json)[status] as Json;
          const headers = responseHeaders(name, status);
          if (response === ErrorEnvelope) {
            responses[status] = errorResponse(name, status);
          } else if (isEventStream(response)) {
            // @ts-rest/open-api drops the content of `otherResponse` (the SSE routes).
            responses[status] = { description: RUN_EVENT_STREAM, headers, content: { "text/event-stream": { schema: registry.ref("RunEvent") } } };
          } else if (otherContentType(response)) {
            // Another `otherResponse` (dropped by @ts-rest/open-api too): a text download.
            const type = otherContentType(response)!;
            responses[status] = { description: DOWNLOADS[type] ?? `A \`${type}\` body.`, headers, content: { [type]: { schema: { type: "string" } } } };
          } else if (generated.content) {
            const content: Json = { "application/json": { schema: schemaOf(response, generated.content["application/json"].schema) } };
            let text = STATUS_CODES[Number(status)] ?? status;
            if (name === "createChatCompletion" && status === "200") {
              content["text/event-stream"] = { schema: registry.ref(registry.nameOf(ChatCompletionStreamFrame)!) };
              text = CHAT_ANSWER;
            }
            if (name === "createResponse" && status === "200") {
              content["text/event-stream"] = { schema: registry.ref("ResponseStreamEvent") };
              text = RESPONSE_ANSWER;
            }
            responses[status] = { description: text, headers, content };
          } else {
            if (status === "302") headers.Location = { description: "Where the browser goes next.", schema: { type: "string", format: "uri" } };
            responses[status] = { description: status === "302" ? "Found: the browser is sent on (see `Location`)." : (STATUS_CODES[Number(status)] ?? status), headers };
          }
        }
        // Any endpoint answers 503 while the service's database is unreachable (not in the contract's types: see COMMON_ERROR_STATUSES).
        responses["503"] ??= errorResponse(name, "503");
        // `idempotency_key_reused` (see the Idempotency-Key parameter).
        if (isPost) responses["409"] ??= errorResponse(name, "409");

        // Plain JSON: openapi3-ts's types (those of @ts-rest/open-api) add nothing the lint test does not check.
        const mapped: Json = {
          tags: [ROUTE_TAGS[name]],
          summary: operation.summary,
          ...(operation.description ? { description: operation.description } : {}),
          operationId: name,
          ...(operation.deprecated ? { deprecated: true } : {}),
          ...(parameters.length ? { parameters } : {}),
          ...(requestBody ? { requestBody } : {}),
          responses: Object.fromEntries(Object.entries(responses).sort(([a], [b]) => a.localeCompare(b))),
          security: SECURITY_BY_AUTH[meta.auth],
          ...(meta.notBuiltYet ? { "x-not-built-yet": meta.notBuiltYet } : {}),
        };
        return mapped as typeof operation;
      },
    },
  ) as Json;
  doc.components = {
    schemas: registry.components(),
    responses: Object.fromEntries([...sharedErrors].sort(([a], [b]) => a.localeCompare(b)).map(([status, r]) => [errorResponseName(status), r])),
    headers: HEADERS,
    parameters: PARAMETERS,
    securitySchemes: SECURITY_SCHEMES,
  };
  return toOpenApi31(doc);
}

export function openApiJson(): string {
  return `${JSON.stringify(buildOpenApi(), null, 2)}\n`;
}
