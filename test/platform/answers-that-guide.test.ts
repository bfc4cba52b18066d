import { afterAll, beforeAll, expect, it } from "vitest";
import OpenAI from "openai";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";

/**
 * Refusals that say what is true and what to do next (docs/app/errors.md, "Answers that say what
 * to do"), each beside a positive control that the same request, put right, is served.
 */
onEachDatabase("answers that say what to do on $db.name", (db) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServerOn(db);
  });
  afterAll(() => server?.close());

  const post = (path: string, body: unknown, key = server.dev.appKey) =>
    server.fetch(path, { method: "POST", headers: { ...bearer(key), "content-type": "application/json" }, body: JSON.stringify(body) });
  const runs = () => server.db.prisma.run.count();

  it("a typo in the svc/ namespace is a 400 naming svc/echo on runs, chat completions and responses, nothing counted; svc/echo itself is served", async () => {
    const before = await runs();
    const rows = await server.db.prisma.usageRow.count();
    for (const [path, body] of [
      ["/v1/runs", { user: "ty", model: "svc/ehco", prompt: "hi" }],
      ["/v1/chat/completions", { user: "ty", model: "svc/ehco", messages: [{ role: "user", content: "hi" }] }],
      ["/v1/responses", { user: "ty", model: "svc/ehco", input: "hi" }],
    ] as const) {
      const e = await expectError(await post(path, body), 400, "invalid_request");
      expect(e.error.param, path).toBe("model");
      expect(e.error.message, path).toMatch(/^Unknown model "svc\/ehco": the service's own model is svc\/echo \(did you mean svc\/echo\?\)/);
    }
    expect(await runs()).toBe(before);
    expect(await server.db.prisma.usageRow.count()).toBe(rows);
    // The positive control: svc/echo answers on each.
    expect((await post("/v1/chat/completions", { user: "ty", model: "svc/echo", messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
    expect((await post("/v1/responses", { user: "ty", model: "svc/echo", input: "hi" })).status).toBe(200);
    expect(await runs()).toBe(before + 2);
  });

  it("a wrong app key says where app keys come from; the right one is served", async () => {
    const [id] = server.dev.appKey.split(".");
    const wrong = await expectError(await server.fetch("/v1/plans", { headers: bearer(`${id}.${"x".repeat(43)}`) }), 401, "invalid_credential");
    expect(wrong.error.message).toMatch(/made in the dashboard \(Keys\) or with `svc keys create --app <appId>`/);
    // Through an OpenAI client, as a developer meets it.
    const client = new OpenAI({ apiKey: `${id}.${"y".repeat(43)}`, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const err = await client.models.list().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as Error).message).toMatch(/svc keys create/);
    expect((await server.fetch("/v1/plans", { headers: bearer(server.dev.appKey) })).status).toBe(200);
  });

  it("a base URL with /v1 twice, or without it, is told the path meant; the right path is served", async () => {
    const doubled = await expectError(await post("/v1/v1/chat/completions", { user: "ty", model: "svc/echo", messages: [{ role: "user", content: "hi" }] }), 404, "route_not_found");
    expect(doubled.error.message).toBe("No route POST /v1/v1/chat/completions. Did you mean /v1/chat/completions? The base URL ends in /v1 once: the client added another.");
    const missing = await expectError(await post("/chat/completions", {}), 404, "route_not_found");
    expect(missing.error.message).toMatch(/Did you mean \/v1\/chat\/completions\? The base URL ends in \/v1\./);
    const tripled = await expectError(await server.fetch("/v1/v1/v1/models", { headers: bearer(server.dev.appKey) }), 404, "route_not_found");
    expect(tripled.error.message).toMatch(/Did you mean \/v1\/models\?/);
    // Nothing to suggest for a path that exists nowhere.
    expect((await expectError(await server.fetch("/v1/v1/nothing-here"), 404, "route_not_found")).error.message).toBe("No route GET /v1/v1/nothing-here.");
    expect((await server.fetch("/v1/models", { headers: bearer(server.dev.appKey) })).status).toBe(200);
  });

  it("a webhook endpoint every delivery would be refused at (loopback, with WEBHOOK_PRIVATE_ADDRESSES=none) is created with a warning naming the setting; a public URL has none", async () => {
    for (const url of ["http://127.0.0.1:9/hook", "http://localhost:9/hook", "http://[::1]:9/hook"]) {
      const res = await post("/v1/webhook_endpoints", { url });
      expect(res.status, url).toBe(201);
      const created = (await res.json()) as { warning: string | null };
      expect(created.warning, url).toMatch(/is a loopback or private address, and this service lets no webhooks reach one: every delivery will be refused.*WEBHOOK_PRIVATE_ADDRESSES.*it is `none`/);
    }
    const fine = (await (await post("/v1/webhook_endpoints", { url: "https://hooks.example.com/svc" })).json()) as { warning: string | null };
    expect(fine.warning).toBeNull();
    const list = (await (await server.fetch("/v1/webhook_endpoints", { headers: bearer(server.dev.appKey) })).json()) as { data: { url: string; warning: string | null }[] };
    expect(list.data.map((e) => [e.url, e.warning !== null]).sort()).toEqual([
      ["http://127.0.0.1:9/hook", true],
      ["http://[::1]:9/hook", true],
      ["http://localhost:9/hook", true],
      ["https://hooks.example.com/svc", false],
    ]);
  });
});
