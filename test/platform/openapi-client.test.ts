import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import openapiTS, { astToString } from "openapi-typescript";
import { TOOLS_DIR } from "../../scripts/test-tools.mjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../helpers/server.js";

const dir = new URL("./openapi-client/", import.meta.url);
const generated = new URL("./generated/openapi.d.ts", dir);

/**
 * A consumer's client from openapi.json alone: types by openapi-typescript, calls by openapi-fetch
 * (test/openapi-client/sample.ts). `defaultNonNullable: false`: a request field with a `default` is
 * optional to send (openapi-typescript's default makes a named schema's defaulted fields required).
 */
async function generateTypes(): Promise<void> {
  const ast = await openapiTS(new URL("../../openapi.json", import.meta.url), { defaultNonNullable: false });
  fs.mkdirSync(new URL("./generated/", dir), { recursive: true });
  fs.writeFileSync(generated, `// Generated from openapi.json by test/platform/openapi-client.test.ts; not committed.\n${astToString(ast)}`);
}

const DOC = fileURLToPath(new URL("../../openapi.json", import.meta.url));
/** A consumer's tool from test/tools (test/tools/openapi-consumers.mjs), in a child process: its one JSON line. */
async function consumerTool(...args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(TOOLS_DIR, "openapi-consumers.mjs"), ...args], { maxBuffer: 16 * 1024 * 1024 });
  return JSON.parse(stdout) as Record<string, unknown>;
}

/** The second generator, as its users run it: @hey-api/openapi-ts with its fetch client, into ./generated/hey-api/. */
async function generateHeyApi(): Promise<void> {
  await consumerTool("hey-api", DOC, fileURLToPath(new URL("./generated/hey-api/", dir)));
}

const tsc = fileURLToPath(new URL("../../node_modules/typescript/bin/tsc", import.meta.url));
/** `tsc -p <config>` of this folder: what it printed, and whether it failed. */
async function typeCheck(config: string): Promise<{ stdout: string; failed?: true }> {
  return promisify(execFile)(process.execPath, [tsc, "-p", fileURLToPath(new URL(config, dir))]).catch((err: { stdout: string }) => ({ stdout: err.stdout, failed: true as const }));
}

/** One service for both generated clients (their users, plans and runs do not meet). */
let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ kind: "pglite", dataDir: null });
});
afterAll(() => server?.close());

describe("openapi.json as a document", () => {
  it("is a valid OpenAPI 3.1 document to swagger-parser (its references resolved, its schemas well-formed)", async () => {
    const api = await consumerTool("validate", DOC);
    expect(api).toEqual({ openapi: "3.1.0", paths: expect.any(Number) });
    expect(api.paths).toBeGreaterThan(50);
  }, 60_000);
});

describe("a client generated from openapi.json (openapi-typescript + openapi-fetch)", () => {
  it("type-checks under strict tsc, and refuses what the API refuses", async () => {
    await generateTypes();
    const result = await typeCheck("./tsconfig.json");
    expect(result.stdout).toBe("");
    expect("failed" in result).toBe(false);
  }, 120_000);

  it("runs the app's main flow: a run whose app tool call and approval are answered over HTTP, a streamed response, the usage", async () => {
    const { flow } = (await import(pathToFileURL(fileURLToPath(new URL("./sample.ts", dir))).href)) as { flow: (baseUrl: string, appKey: string, user: string) => Promise<Record<string, any>> };
    const r = await flow(server.url, server.dev.appKey, "fetch-flow-user");
    expect(r.kinds).toEqual(expect.arrayContaining(["run_started", "tool_call", "approval_request", "run_completed"]));
    expect(r.toolResults).toEqual(["weather:true", "send_mail:true"]);
    expect(r.approvals).toEqual(["allow"]);
    expect(r.output).toBe("Done: sent.");
    expect(r.responseEvents[0]).toBe("response.created");
    expect(r.responseEvents).toContain("response.completed");
    expect(r.usageKinds).toContain("echo");
  }, 60_000);

  it("talks to the real server: a plan, a handed-back run and its usage, a user, chat completions plain and streamed, a typed error", async () => {
    // Loaded by path: its type-only import of the generated types exists only once the test above ran.
    const { sample } = (await import(pathToFileURL(fileURLToPath(new URL("./sample.ts", dir))).href)) as { sample: (baseUrl: string, appKey: string) => Promise<Record<string, any>> };
    const r = await sample(`${server.url}`, server.dev.appKey);

    expect(r.plan).toMatchObject({ slug: "starter", name: "Starter", priceMicros: 5_000_000, currency: "usd", period: "month", allowance: { unit: "runs", limit: 100 } });
    expect(r.plan.id).toMatch(/^plan_[a-z0-9]{20}$/);
    expect(r.planSlugs).toContain("starter");
    expect(r.planRequestId).toMatch(/^req_[a-z0-9]{20}$/);

    expect(r.handback.status).toBe(409);
    expect(r.handback.error.code).toBe("serve_in_app");
    expect(r.handback.runId).toMatch(/^run_[a-z0-9]{24}$/);
    expect(r.run).toMatchObject({ id: r.handback.runId, user: "openapi-user", status: "handed_back", route: "app", costClass: "app_served" });
    expect(r.reported).toEqual({ runId: r.handback.runId, costClass: "app_served", inputTokens: 120, outputTokens: 30, amountMicros: expect.any(Number) });
    expect(r.usageKinds).toContain("app_usage");
    expect(r.user).toMatchObject({ id: "openapi-user", environment: "test" });
    expect(r.user.usage.runs).toBeGreaterThanOrEqual(1);

    expect(r.echo.content).toBe("ping");
    expect(r.echo.finishReason).toBe("stop");
    expect(r.echo.runId).toMatch(/^run_[a-z0-9]{24}$/);
    expect(r.streamedType).toMatch(/^text\/event-stream/);
    expect(r.streamedText).toContain('"object":"chat.completion.chunk"');
    expect(r.streamedText.trimEnd().endsWith("data: [DONE]")).toBe(true);

    expect(r.missing).toEqual({ status: 404, code: "not_found" });
  }, 60_000);
});

describe("a client generated from openapi.json by a second generator (@hey-api/openapi-ts, its fetch client)", () => {
  it("generates, type-checks under strict tsc with no casts, and runs the main flow against the server", async () => {
    await generateHeyApi();
    const checked = await typeCheck("./tsconfig.hey-api.json");
    expect(checked.stdout).toBe("");
    expect("failed" in checked).toBe(false);
    expect(fs.readFileSync(new URL("./hey-api-sample.ts", dir), "utf8")).not.toMatch(/\bas (any|never|unknown)\b|\bas [A-Z]/);
    const { heyApiSample } = (await import(pathToFileURL(fileURLToPath(new URL("./hey-api-sample.ts", dir))).href)) as { heyApiSample: (baseUrl: string, appKey: string, user: string) => Promise<Record<string, any>> };
    const r = await heyApiSample(server.url, server.dev.appKey, "hey-api-user");
    expect(r.kinds).toEqual(expect.arrayContaining(["run_started", "tool_call", "approval_request", "run_completed"]));
    expect(r.toolResults).toEqual(["weather:true", "send_mail:true"]);
    expect(r.approvals).toEqual(["allow"]);
    expect(r.output).toBe("Done: sent.");
    expect(r.runStatus).toBe("completed");
    expect(r.chat).toBe("ping");
    expect(r.responseEvents[0]).toBe("response.created");
    expect(r.responseEvents).toContain("response.completed");
    expect(r.usageKinds).toContain("echo");
  }, 120_000);
});
