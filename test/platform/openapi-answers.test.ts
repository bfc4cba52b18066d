import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OpenApiCheck, openApiCheck, takeMismatches } from "../helpers/openapi-check.js";
import { signInOwner } from "../helpers/owner.js";
import { startTestServer, type TestServer } from "../helpers/server.js";

/**
 * The answers check every suite runs (test/helpers/openapi-check.ts) against the four kinds
 * of fault openapi.json had as OpenAPI 3.0 (issue 52), each put back into a copy of the
 * committed document: the copy's check finds the fault in the real server's answers (or in
 * a request the server accepts), and the committed document's check, watching the same
 * answers, finds none. So the check can fail, and the document no longer does.
 */
type Json = Record<string, any>;
const committed = fs.readFileSync(new URL("../../openapi.json", import.meta.url), "utf8");

/** The committed document with `change` made to it. */
function broken(change: (doc: Json) => void): OpenApiCheck {
  const doc = JSON.parse(committed) as Json;
  change(doc);
  return new OpenApiCheck(JSON.stringify(doc));
}

describe("openapi.json against the server's real answers", () => {
  let server: TestServer;
  const app = (path: string, init: { method?: string; body?: unknown } = {}) =>
    server.fetch(path, { method: init.method ?? "GET", headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" }, ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }) });
  const problems = (c: OpenApiCheck) => c.mismatches.splice(0).map((m) => m.problem);

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
  });
  afterAll(() => server?.close());

  it("a named schema that may be null: as 3.0 wrote it (nullable beside allOf: [$ref]), a user without a plan is refused; as 3.1 writes it, taken", async () => {
    const old = broken((doc) => (doc.components.schemas.User.properties.plan = { type: "object", nullable: true, allOf: [{ $ref: "#/components/schemas/Plan" }] }));
    const now = new OpenApiCheck(committed);
    old.attach(server.http);
    now.attach(server.http);
    await app("/v1/end_users/session", { method: "POST", body: { user: "planless" } });
    const res = await app("/v1/users/planless");
    expect(res.status).toBe(200);
    expect((await res.json()).plan).toBeNull();
    expect(problems(old)).toEqual([expect.stringMatching(/^GET \/v1\/users\/\{id\} 200: the body does not match: \/plan must be object/)]);
    expect(problems(now)).toEqual([]);
  });

  it("overlapping union branches: as a 3.0 oneOf with a catch-all, the docs' function_call_output request is refused; as anyOf, taken", async () => {
    const old = broken((doc) => {
      const input = doc.components.schemas.CreateResponseRequest.properties.input;
      const items = input.anyOf.find((b: Json) => b.type === "array").items;
      items.oneOf = items.anyOf;
      delete items.anyOf;
    });
    const now = new OpenApiCheck(committed);
    old.attach(server.http);
    now.attach(server.http);
    const tools = [{ type: "function", name: "get_weather", parameters: { type: "object" } }];
    // docs/app/responses.md, both requests as written there.
    const first = await (await app("/v1/responses", { method: "POST", body: { model: "svc/echo", user: "alice", tools, input: '[{"call": "get_weather", "arguments": {"city": "Paris"}}, {"say": "It is {{result}}."}]' } })).json();
    const call = first.output.find((o: Json) => o.type === "function_call");
    const second = await app("/v1/responses", { method: "POST", body: { model: "svc/echo", user: "alice", previous_response_id: first.id, tools, input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }] } });
    expect(second.status).toBe(200);
    expect((await second.json()).output[0].content[0].text).toBe("It is sunny.");
    expect(problems(old)).toEqual([expect.stringMatching(/^POST \/v1\/responses 200: the request body does not match: \/input/)]);
    expect(problems(now)).toEqual([]);
  });

  it("the CSV export: with no content declared its body is a fault; declared text/csv, taken", async () => {
    const exportPath = "/v1/owner/apps/{app}/env/{env}/usage/export";
    const old = broken((doc) => delete doc.paths[exportPath].get.responses["200"].content);
    const now = new OpenApiCheck(committed);
    old.attach(server.http);
    now.attach(server.http);
    const owner = await signInOwner(server);
    const res = await owner.fetch(`/v1/owner/apps/${server.dev.appId}/env/test/usage/export`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/csv/);
    expect(problems(old)).toEqual([expect.stringMatching(/usage\/export 200: a text\/csv body where none is declared/)]);
    expect(problems(now)).toEqual([]);
  });

  it("every test server is watched by the suite's check, which fails the test that got a mismatch (wired in vitest.config.ts)", async () => {
    const shared = openApiCheck();
    const before = { ...shared.counts };
    await app("/v1/users/nobody-here");
    await app("/v1/plans");
    expect(shared.counts.answers).toBe(before.answers + 2);
    expect(fs.readFileSync(new URL("../../vitest.config.ts", import.meta.url), "utf8")).toMatch(/setupFiles: \["test\/helpers\/openapi-check-setup\.ts"/);
    // After each test the setup file fails it with what the check found: here a check of a wrong document, on a real answer.
    const wrong = broken((doc) => (doc.paths["/v1/plans"].get.responses["200"].content["application/json"].schema = { type: "string" }));
    wrong.attach(server.http);
    await app("/v1/plans");
    expect(takeMismatches(wrong)?.message).toMatch(/^answers that do not match openapi.json:\n {2}GET \/v1\/plans 200: the body does not match: \/ must be string/);
    expect(takeMismatches(wrong)).toBeNull();
    expect(takeMismatches(shared)).toBeNull();
  });

  it("security schemes are only those operations take (no documentary pairing token or connect-key header a generator would send)", () => {
    const doc = JSON.parse(committed) as Json;
    const used = new Set(Object.values<Json>(doc.paths).flatMap((item) => Object.values<Json>(item).flatMap((op) => (op.security ?? []).flatMap((s: Json) => Object.keys(s)))));
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual([...used].sort());
    expect(JSON.stringify(doc.components.securitySchemes)).not.toMatch(/X-Connect-Key-In-Path|pt_svc_/);
  });
});
