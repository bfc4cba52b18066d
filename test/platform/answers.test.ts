import { afterAll, beforeAll, describe, expect, it } from "vitest";
import OpenAI from "openai";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";
import { expectError } from "../helpers/requests.js";

/**
 * Answers that say what happened, as a developer meets them: the request id where
 * OpenAI's client reads it, a model none of the user's machines serves, OpenAI's
 * `safety_identifier` as the end user, a month that is no month, a body too large,
 * a route called without `/v1`.
 */
describe("answers that say what happened", () => {
  let server: TestServer;
  let model: ModelStandIn;
  let worker: WorkerProcess;
  let client: OpenAI;
  const app = () => ({ authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" });

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, { MAX_BODY_BYTES: "4096" }, { runningClock: true });
    model = await startModelStandIn();
    client = new OpenAI({ apiKey: server.dev.appKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const m = await pairViaApi(server, server.dev, "nora", { runtimes: { ollama: model.url, llamacpp: false, lmstudio: false, claude: false, codex: false } });
    worker = spawnWorker(["start"], m.home);
    await worker.waitFor(/Connected/);
    await pollUntil(async () => (await (await server.fetch("/v1/users/nora/compute", { headers: app() })).json()) as { machines: { state: string }[] }, (c) => c.machines[0]?.state === "online");
  }, 120_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  it("the request id is in x-request-id too, where the official OpenAI client reads it", async () => {
    const { data, response } = await client.chat.completions.create({ model: "svc/echo", user: "nora", messages: [{ role: "user", content: "hi" }] }).withResponse();
    expect(data.choices[0].message.content).toBe("hi");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(response.headers.get("x-request-id")).toBe(response.headers.get("request-id"));
    const completion = await client.chat.completions.create({ model: "svc/echo", user: "nora", messages: [{ role: "user", content: "hi" }] });
    expect((completion as unknown as { _request_id?: string })._request_id).toMatch(/^req_/);
  });

  it("a model none of the user's machines serves is handed back, saying which model and what they do serve", async () => {
    const err = await client.chat.completions.create({ model: "ollama/no-such-model", user: "nora", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.ConflictError);
    const message = (err as Error).message;
    expect(message).toContain("for model ollama/no-such-model");
    expect(message).toContain("is online but none serves ollama/no-such-model: it serves ollama/llama3.2:3b, ollama/qwen2.5:7b");
    expect(message).toContain("GET /v1/models?user=nora");
    const run = await server.fetch("/v1/runs", { method: "POST", headers: app(), body: JSON.stringify({ user: "nora", prompt: "x", model: "ollama/no-such-model" }) });
    const body = await expectError(run, 409, "serve_in_app");
    expect(body.error.message).toContain("for model ollama/no-such-model on the routes asked (user-hardware, user-subscription): nora's machine");
    expect(body.error.message).toContain("none serves ollama/no-such-model: it serves ollama/llama3.2:3b");
    const none = await server.fetch("/v1/runs", { method: "POST", headers: app(), body: JSON.stringify({ user: "nobody-here", prompt: "x", route: { prefer: ["user-hardware"] } }) });
    expect((await expectError(none, 409, "no_compute")).error.message).toContain("nobody-here has no machine paired");
  });

  it("chat completions take OpenAI's safety_identifier as the end user when user is absent; user wins when both are sent; neither is a 400", async () => {
    const asked = async (body: Record<string, unknown>) => {
      const res = await server.fetch("/v1/chat/completions", { method: "POST", headers: app(), body: JSON.stringify({ model: "svc/echo", messages: [{ role: "user", content: "who" }], ...body }) });
      expect(res.status).toBe(200);
      const [row] = await server.db.query<{ external_id: string }>(`SELECT e.external_id FROM runs r JOIN end_users e ON e.id = r.end_user_id WHERE r.id = $1`, [res.headers.get("service-run-id")]);
      return row?.external_id;
    };
    await pollUntil(() => asked({ safety_identifier: "hashed-7f3a" }), (u) => u === "hashed-7f3a");
    await pollUntil(() => asked({ user: "nora", safety_identifier: "hashed-7f3a" }), (u) => u === "nora");
    const neither = await server.fetch("/v1/chat/completions", { method: "POST", headers: app(), body: JSON.stringify({ model: "svc/echo", messages: [{ role: "user", content: "who" }] }) });
    expect((await expectError(neither, 400, "invalid_request")).error.param).toBe("user");
  });

  it("a period that is no month is 400, not an empty list; a body too large says the limit; a route without /v1 points at the base URL", async () => {
    for (const period of ["2026-13", "2026-00"]) {
      const res = await server.fetch(`/v1/usage?period=${period}`, { headers: app() });
      expect((await expectError(res, 400, "invalid_request")).error.param).toBe("period");
    }
    expect((await server.fetch("/v1/usage?period=2026-12", { headers: app() })).status).toBe(200);
    const big = await server.fetch("/v1/runs", { method: "POST", headers: app(), body: JSON.stringify({ user: "nora", prompt: "x".repeat(5000) }) });
    expect((await expectError(big, 413, "payload_too_large")).error.message).toContain("at most 4096 bytes");
    const bare = await server.fetch("/chat/completions", { method: "POST", headers: app(), body: "{}" });
    expect((await expectError(bare, 404, "route_not_found")).error.message).toContain("Did you mean /v1/chat/completions? The base URL ends in /v1.");
  });
});
