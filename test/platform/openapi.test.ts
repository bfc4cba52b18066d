import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { z } from "zod";
import { contract, RUN_EVENT_KINDS } from "@svc/contract";
import { openApiJson } from "../../server/openapi.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

describe("openapi.json", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
  });
  afterAll(() => server?.close());

  it("is committed and matches the contract (run `npm run openapi` when this fails)", () => {
    const committed = fs.readFileSync(new URL("../../openapi.json", import.meta.url), "utf8");
    expect(committed === openApiJson(), "openapi.json is stale: run `npm run openapi` and commit it").toBe(true);
  });

  it("documents every route with its credential and the shared error envelope", () => {
    const doc = JSON.parse(openApiJson());
    for (const route of Object.values(contract)) {
      const path = route.path.replace(/:(\w+)/g, "{$1}");
      const op = doc.paths[path]?.[route.method.toLowerCase()];
      expect(op, `${route.method} ${path}`).toBeDefined();
      expect(op.responses["401"] ?? op.responses["500"]).toBeDefined();
      expect(resolve(doc, op.responses["500"]).content["application/json"].schema.$ref).toBe("#/components/schemas/Error");
    }
    expect(doc.paths["/v1/runs"].post.security).toEqual([{ appKey: [] }]);
    expect(doc.paths["/v1/machines"].get.security).toEqual([{ sessionToken: [] }]);
    expect(doc.paths["/c/{pk}/v1/device/code"].post.security).toEqual([]);
    // Only the credentials an operation takes: no documentary schemes a generator would act on (the connect key is in
    // the pairing paths, the pairing token only on the worker's WebSocket).
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(["appKey", "ownerSession", "sessionToken"]);
    const used = new Set(Object.values<Json>(doc.paths).flatMap((item) => Object.values<Json>(item).flatMap((op) => (op.security ?? []).flatMap((s: Json) => Object.keys(s)))));
    expect([...used].sort()).toEqual(["appKey", "ownerSession", "sessionToken"]);
    expect(doc.paths["/v1/runs"].post.responses["200"].content["text/event-stream"].schema.$ref).toBe("#/components/schemas/RunEvent");
  });

  it("gives every operation one declared tag, a required body, Idempotency-Key on POSTs and a 2xx", () => {
    const doc = JSON.parse(openApiJson());
    const declared = new Map<string, string>(doc.tags.map((t: { name: string; description: string }) => [t.name, t.description]));
    for (const name of ["runs", "chat", "users", "usage", "plans", "billing", "webhooks", "pairing", "machines", "sessions"]) expect(declared.get(name), name).toBeTruthy();
    for (const [name, route] of Object.entries(contract)) {
      const op = operation(doc, route);
      expect(op.operationId).toBe(name);
      expect(op.tags, name).toHaveLength(1);
      expect(declared.has(op.tags[0]), `${name}: tag ${op.tags[0]} declared`).toBe(true);
      if (op.requestBody) {
        expect(op.requestBody.required, name).toBe(!(route as { body: z.ZodTypeAny }).body.isOptional());
        expect(Object.values(op.requestBody.content as Record<string, { schema: { $ref?: string } }>)[0].schema.$ref, `${name}: named body`).toMatch(/^#\/components\/schemas\//);
      }
      const idempotency = (op.parameters ?? []).some((p: { $ref?: string }) => p.$ref === "#/components/parameters/IdempotencyKey");
      expect(idempotency, `${name}: Idempotency-Key`).toBe(route.method === "POST");
      const success = Object.keys(op.responses).filter((s) => s.startsWith("2"));
      // PUT /v1/billing/account always answers 410 (redocly.yaml turns operation-2xx-response off for it).
      if (name === "connectBillingAccount") expect(success).toEqual([]);
      else expect(success.length, `${name}: a 2xx`).toBeGreaterThan(0);
      for (const status of success) {
        for (const [type, media] of Object.entries(op.responses[status].content ?? {}) as [string, { schema: { $ref?: string } }][]) {
          // A download is text of its own type (the CSV export); everything else a named schema.
          if (type === "text/csv") expect(media.schema, `${name} ${status} ${type}`).toEqual({ type: "string" });
          else expect(media.schema.$ref, `${name} ${status} ${type}: named`).toMatch(/^#\/components\/schemas\//);
        }
      }
    }
    expect(doc.paths["/v1/plans"].post.requestBody.required).toBe(true);
    expect(doc.paths["/v1/runs/{id}/cancel"].post.requestBody.required).toBe(false);
    const key = doc.components.parameters.IdempotencyKey;
    expect(key).toMatchObject({ name: "Idempotency-Key", in: "header", required: false });
    expect(key.description).toMatch(/24 hours/);
    expect(key.description).toMatch(/409 idempotency_key_reused/);
  });

  it("sends the request id on every answer, Service-Run-Id on run starts and chat completions, Retry-After on 429 and 503", () => {
    const doc = JSON.parse(openApiJson());
    for (const route of Object.values(contract)) {
      const op = operation(doc, route);
      for (const [status, ref] of Object.entries(op.responses as Record<string, Json>)) {
        const headers = resolve(doc, ref).headers ?? {};
        expect(headers["Request-Id"], `${route.path} ${status}`).toEqual({ $ref: "#/components/headers/RequestId" });
        expect(headers["x-request-id"], `${route.path} ${status}`).toEqual({ $ref: "#/components/headers/XRequestId" });
        if (status === "429" || status === "503") expect(headers["Retry-After"], `${route.path} ${status}`).toEqual({ $ref: "#/components/headers/RetryAfter" });
      }
    }
    for (const op of [doc.paths["/v1/runs"].post, doc.paths["/v1/chat/completions"].post]) {
      expect(op.responses["200"].headers["Service-Run-Id"]).toEqual({ $ref: "#/components/headers/ServiceRunId" });
      expect(op.responses["409"].headers["Service-Run-Id"].description).toMatch(/serve_in_app/);
    }
  });

  it("types the streams: run events on the run start and re-attach, chunks beside the chat completion", () => {
    const doc = JSON.parse(openApiJson());
    for (const op of [doc.paths["/v1/runs"].post, doc.paths["/v1/runs/{id}/events"].get]) {
      expect(Object.keys(op.responses["200"].content)).toEqual(["text/event-stream"]);
      expect(op.responses["200"].content["text/event-stream"].schema.$ref).toBe("#/components/schemas/RunEvent");
    }
    const chat = doc.paths["/v1/chat/completions"].post.responses["200"].content;
    expect(chat["application/json"].schema.$ref).toBe("#/components/schemas/ChatCompletion");
    // Each frame a chunk, or the error envelope as the last one when the completion fails after streaming began.
    expect(chat["text/event-stream"].schema.$ref).toBe("#/components/schemas/ChatCompletionStreamFrame");
    const frames = doc.components.schemas.ChatCompletionStreamFrame.anyOf;
    expect(frames[0]).toEqual({ $ref: "#/components/schemas/ChatCompletionChunk" });
    // The error frame relays the run's failure code, a runtime's own included: any string, not only the service's codes.
    expect(frames[1].properties.error.properties.code).toMatchObject({ type: "string" });
    expect(frames[1].properties.error.properties.code.enum).toBeUndefined();
    // Every kind the contract has, each its own schema, no other; and the description lists them all.
    const runEvent = doc.components.schemas.RunEvent;
    expect(runEvent.discriminator.propertyName).toBe("kind");
    expect(Object.keys(runEvent.discriminator.mapping).sort()).toEqual([...RUN_EVENT_KINDS].sort());
    expect(runEvent.oneOf).toHaveLength(RUN_EVENT_KINDS.length);
    for (const [kind, ref] of Object.entries(runEvent.discriminator.mapping) as [string, string][]) {
      const schema = resolve(doc, { $ref: ref });
      expect(schema.properties.kind.enum).toEqual([kind]);
      expect(schema.description, kind).toBeTruthy();
      expect(schema.examples[0].kind, kind).toBe(kind);
    }
    for (const kind of RUN_EVENT_KINDS) expect(doc.info.description).toContain(`\`${kind}\``);
  });

  it("names the resources, bodies and events, with examples in the service's id formats, and uses every component", () => {
    const doc = JSON.parse(openApiJson());
    const schemas = doc.components.schemas;
    const withExamples = ["Run", "CreateRunRequest", "User", "Machine", "Runtime", "Plan", "PlanInput", "UsageRow", "UsagePage", "Error", "ChatCompletion", "ChatCompletionRequest", "ChatCompletionChunk", "WebhookEndpoint", "WebhookDelivery", "Session", "DeviceCodeResponse"];
    for (const name of [...withExamples, "RunEvent", "ChatMessage", "TokenUsage", "MachineList", "PlanList", "BillingAccount", "BillingOverview", "ModelList"]) expect(schemas[name], name).toBeDefined();
    for (const name of withExamples) expect(schemas[name].examples?.[0], name).toBeDefined();
    expect(schemas.Run.examples[0].id).toMatch(/^run_[a-z0-9]{24}$/);
    expect(schemas.Run.examples[0].machineId).toMatch(/^mch_[a-z0-9]{20}$/);
    expect(schemas.Plan.examples[0].id).toMatch(/^plan_[a-z0-9]{20}$/);
    expect(schemas.WebhookEndpoint.examples[0].id).toMatch(/^we_[a-z0-9]{20}$/);
    expect(schemas.Error.examples[0].error.requestId).toMatch(/^req_[a-z0-9]{20}$/);
    // Nested resources are `$ref`s too, not copies.
    expect(schemas.Machine.properties.runtimes.items.$ref).toBe("#/components/schemas/Runtime");
    // A named schema that may be null where it is used: the 3.1 way, which every validator reads as the server answers.
    expect(schemas.User.properties.plan).toEqual({ anyOf: [{ $ref: "#/components/schemas/Plan" }, { type: "null" }] });
    expect(schemas.UsagePage.properties.data.items.$ref).toBe("#/components/schemas/UsageRow");
    // Every component is used (Redocly's no-unused-components checks the same).
    const text = JSON.stringify(doc.paths) + JSON.stringify({ ...doc.components, securitySchemes: undefined });
    for (const kind of ["schemas", "responses", "headers", "parameters"]) {
      for (const name of Object.keys(doc.components[kind])) expect(text.includes(`"#/components/${kind}/${name}"`), `${kind}/${name} used`).toBe(true);
    }
  });

  it("is served at /v1/openapi.json without a credential", async () => {
    const res = await server.fetch("/v1/openapi.json");
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(openApiJson());
  });

  it("has a reference page at /docs whose assets are all served here (no CDN)", async () => {
    const res = await server.fetch("/docs");
    expect(res.status).toBe(200);
    const html = await res.text();
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(refs.length).toBeGreaterThanOrEqual(3);
    for (const ref of refs) {
      expect(ref, "an asset from another host").toMatch(/^\/docs\//);
      const asset = await server.fetch(ref);
      expect(asset.status, ref).toBe(200);
      expect((await asset.arrayBuffer()).byteLength, ref).toBeGreaterThan(100);
    }
  });
});

type Json = Record<string, any>;

/** The operation of a contract route in the document. */
function operation(doc: Json, route: { method: string; path: string }): Json {
  return doc.paths[route.path.replace(/:(\w+)/g, "{$1}")][route.method.toLowerCase()];
}

/** Follows a local `$ref` (`#/components/...`). */
function resolve(doc: Json, node: Json): Json {
  if (!node.$ref) return node;
  return resolve(doc, (node.$ref as string).slice(2).split("/").reduce((at: Json, key) => at[key], doc));
}
