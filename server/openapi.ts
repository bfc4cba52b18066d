import { generateOpenApi } from "@ts-rest/open-api";
import { generateSchema } from "@anatine/zod-openapi";
import { contract, ERROR_CODES, ErrorEnvelope, RunEvent, SECURITY_SCHEMES, type RouteMetadata } from "@svc/contract";
import type { AppRoute } from "@ts-rest/core";

const SECURITY_BY_AUTH: Record<RouteMetadata["auth"], Record<string, string[]>[]> = {
  appKey: [{ appKey: [] }],
  session: [{ sessionToken: [] }],
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

**Errors** always come in one envelope, \`{"error":{"type","code","message","requestId"}}\`, and a code always has the same status:

${codeTable}

**Credentials**: app key (\`sk_svc_<id>.<secret>\`) on the app endpoints; no credential on the pairing endpoints (the connect key \`pk_svc_...\` is in the path); the end-user session (\`est_...\`) on the browser endpoints; the pairing token (\`pt_svc_...\`) only on the worker connection. Each endpoint takes exactly its one credential.

**Run events** (\`text/event-stream\` of \`POST /v1/runs\`): each frame has \`id:\` (sequence, for \`Last-Event-ID\`), \`event:\` (kind) and JSON \`data:\`; kinds: \`run_started\`, \`text_delta\`, \`tool_call\`, \`approval_request\`, \`usage\`, \`run_completed\`, \`run_failed\`, \`run_cancelled\`.`;

/** The OpenAPI 3.0 document of the contract; `openapi.json` is this, committed. */
export function buildOpenApi() {
  const doc = generateOpenApi(
    contract,
    {
      info: { title: "svc API", version: "1.0.0", description },
      servers: [{ url: "/", description: "This server" }],
      components: {
        securitySchemes: SECURITY_SCHEMES as never,
        schemas: { ErrorEnvelope: generateSchema(ErrorEnvelope), RunEvent: generateSchema(RunEvent) } as never,
      },
    },
    {
      setOperationId: true,
      operationMapper: (operation, appRoute: AppRoute) => {
        const meta = appRoute.metadata as RouteMetadata;
        const responses = { ...operation.responses };
        for (const [status, response] of Object.entries(appRoute.responses)) {
          // One shared envelope schema instead of a copy per response.
          if (response === ErrorEnvelope) {
            responses[status] = {
              description: responses[status]?.description ?? "Error",
              content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorEnvelope" } } },
            };
            continue;
          }
          // @ts-rest/open-api drops the content of `otherResponse` (the SSE routes).
          if (response && typeof response === "object" && "contentType" in response && response.contentType === "text/event-stream") {
            responses[status] = {
              description: "A `text/event-stream`: each frame has `id:` (sequence), `event:` (kind) and `data:`, one JSON object of the schema below.",
              content: { "text/event-stream": { schema: { $ref: "#/components/schemas/RunEvent" } } },
            };
          }
        }
        // Any endpoint answers 503 while the service's database is unreachable (not in the contract's types: see COMMON_ERROR_STATUSES).
        responses["503"] ??= {
          description: "The service is unavailable for a moment (`database_unavailable`: its database is unreachable): retry after `Retry-After` seconds.",
          content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorEnvelope" } } },
        };
        return {
          ...operation,
          responses,
          security: SECURITY_BY_AUTH[meta.auth],
          ...(meta.notBuiltYet ? { "x-not-built-yet": meta.notBuiltYet } : {}),
        };
      },
    },
  );
  return doc;
}

export function openApiJson(): string {
  return `${JSON.stringify(buildOpenApi(), null, 2)}\n`;
}
