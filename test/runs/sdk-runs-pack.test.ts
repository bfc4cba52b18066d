import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { promisify } from "node:util";
import type { AddressInfo } from "node:net";
import { execFile } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeTempDirs, ROOT, tempDir } from "../helpers/process.js";
import { installInto, packSdk } from "../helpers/sdk-package.js";

/**
 * `@svc/sdk` as an app developer gets it: packed alone (the contract's runtime
 * pieces bundled in), installed into an empty project, a strict TypeScript app written against it
 * type-checked (and a wrong one refused), then run against a scripted server.
 */

const execFileAsync = promisify(execFile);
const TSC = path.join(ROOT, "node_modules/typescript/bin/tsc");

const TSCONFIG = {
  compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2023", "DOM"], types: [], strict: true, outDir: "out" },
};

/** The app: every event kind read through its own fields, answers given by tools and handlers, a handback served. */
const SAMPLE = `
import { Svc, PaymentRequiredError, type RunEvent, type RunResult, type RunStream } from "@svc/sdk";

const svc = new Svc({ maxReconnects: 3 });
const seen: string[] = [];

function describe(event: RunEvent): string {
  switch (event.kind) {
    case "run_started": return event.kind + ":" + event.route + ":" + (event.machineId ?? "-");
    case "text_delta": return event.kind + ":" + event.text;
    case "tool_call": return event.kind + ":" + event.name + ":" + event.callId;
    case "approval_request": return event.kind + ":" + event.what + ":" + event.tool;
    case "usage": return event.kind + ":" + event.usage.inputTokens;
    case "run_completed": return event.kind + ":" + event.output + ":" + event.stopReason;
    case "run_failed": return event.kind + ":" + event.error.message;
    case "run_cancelled": return event.kind + ":" + (event.reason ?? "");
    default: return event.kind;
  }
}

async function main(): Promise<void> {
  const run: RunStream = svc.runs.create({
    user: "alice",
    prompt: "weather in Paris?",
    tools: [
      {
        name: "get_weather",
        description: "The weather in a city",
        parameters: { type: "object", properties: { city: { type: "string" } } },
        needsApproval: true,
        run: async (args, ctx) => ({ city: (args as { city: string }).city, tempC: 21, callId: ctx.callId, aborted: ctx.signal.aborted }),
      },
    ],
    onApproval: async (req) => (req.tool === "get_weather" ? true : { decision: "deny", reason: "not that one" }),
  });
  seen.push("id:" + (await run.runId));
  for await (const event of run) seen.push(describe(event));
  const result: RunResult = await run.result();
  seen.push("result:" + result.status + ":" + result.output + ":" + result.usage.outputTokens + ":" + result.route);

  const handedBack = svc.runs.create({
    user: "alice",
    prompt: "offline",
    serveInApp: async (h) => ({ output: "served " + h.prompt + " for " + h.user, usage: { inputTokens: 3, outputTokens: 4, model: "gpt-x" } }),
  });
  for await (const event of handedBack) seen.push("unexpected:" + event.kind);
  const served = await handedBack.result();
  seen.push("result:" + served.status + ":" + served.output + ":" + served.route + ":" + served.runId);

  try {
    await svc.runs.create({ user: "alice", prompt: "broke" }).result();
  } catch (err) {
    if (err instanceof PaymentRequiredError) seen.push("error:" + err.status + ":" + err.code + ":" + err.runId);
    else throw err;
  }
  console.log(JSON.stringify(seen));
}
main().catch((err) => { console.error(err); process.exitCode = 1; });
declare const process: { exitCode?: number };
`;

/** A mistake the types must catch: a tool call has no text. */
const WRONG = `
import { Svc } from "@svc/sdk";
const run = new Svc().runs.create({ user: "alice", prompt: "hi" });
for await (const event of run) if (event.kind === "tool_call") console.log(event.text);
`;

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: unknown;
}

/** The service's side of the three runs, scripted: frames as the server writes them. */
function scriptedServer() {
  const requests: Seen[] = [];
  let toolAnswered!: () => void;
  const toolResult = new Promise<void>((r) => (toolAnswered = r));
  let approvalAnswered!: () => void;
  const approval = new Promise<void>((r) => (approvalAnswered = r));
  const frame = (id: number, data: { kind: string } & Record<string, unknown>) => `id: ${id}\nevent: ${data.kind}\ndata: ${JSON.stringify(data)}\n\n`;
  const events = [
    frame(1, { kind: "run_started", runId: "run_1", route: "user-hardware", costClass: "user_hardware", machineId: "mch_1", runtime: "ollama", model: "llama3" }),
    frame(2, { kind: "approval_request", approvalId: "apr_1", what: "tool", tool: "get_weather", callId: "call_1", arguments: { city: "Paris" }, deadlineAt: "2030-01-01T00:00:00Z" }),
    frame(3, { kind: "tool_call", callId: "call_1", name: "get_weather", arguments: { city: "Paris" }, deadlineAt: "2030-01-01T00:00:00Z" }),
    frame(4, { kind: "text_delta", turn: 2, text: "Sunny, 21C" }),
    frame(5, { kind: "some_future_kind", whatever: true }),
    frame(6, { kind: "usage", turn: 2, usage: { inputTokens: 10, outputTokens: 5, costClass: "user_hardware", amountMicros: 0 } }),
    frame(7, { kind: "run_completed", output: "Sunny, 21C", usage: { inputTokens: 20, outputTokens: 9, costClass: "user_hardware", amountMicros: 0 }, stopReason: "end_turn" }),
  ];
  const envelope = (code: string) => ({ error: { type: "x", code, message: code, requestId: "req_1" } });
  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));

  const server = http.createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = raw ? JSON.parse(raw) : undefined;
    requests.push({ method: req.method!, url: req.url!, headers: req.headers, body });
    const stream = () => res.writeHead(200, { "content-type": "text/event-stream", "service-run-id": "run_1" });
    if (req.method === "POST" && req.url === "/v1/runs") {
      if (body.prompt === "offline") return json(res, 409, envelope("serve_in_app"), { "service-run-id": "run_2" });
      if (body.prompt === "broke") return json(res, 402, envelope("allowance_exhausted"), { "service-run-id": "run_3" });
      stream();
      res.write(": keep-alive\n\n" + events[0] + events[1]);
      await approval;
      // The connection drops in the middle of a frame: the half frame must never surface.
      res.write(events[2] + "id: 4\nevent: text_delta\ndata: {\"kind\":");
      return setTimeout(() => res.destroy(), 50);
    }
    if (req.method === "GET" && req.url === "/v1/runs/run_1/events") {
      stream();
      // A careless server repeating events already delivered: the client drops them.
      res.write(events[1] + events[2]);
      await toolResult;
      return res.end(events.slice(3).join(""));
    }
    if (req.url === "/v1/runs/run_1/approval") return approvalAnswered(), json(res, 200, { runId: "run_1", approvalId: body.approvalId, decision: "allow" });
    if (req.url === "/v1/runs/run_1/tool_result") return toolAnswered(), json(res, 200, { runId: "run_1", callId: body.callId, accepted: true });
    if (req.url === "/v1/runs/run_2/usage") return json(res, 200, { runId: "run_2", costClass: "app_served", inputTokens: 3, outputTokens: 4, amountMicros: 0 });
    json(res, 404, envelope("route_not_found"));
  });
  return { server, requests };
}

describe("the @svc/sdk package", () => {
  let project: string;
  beforeAll(() => {
    const dir = tempDir("svc-sdk-pack-");
    const tarball = packSdk(dir);
    expect(path.basename(tarball)).toBe("svc-sdk-0.1.0.tgz");
    project = path.join(dir, "project");
    installInto(project, tarball);
    fs.writeFileSync(path.join(project, "tsconfig.json"), JSON.stringify({ ...TSCONFIG, files: ["index.ts"] }));
    fs.writeFileSync(path.join(project, "tsconfig.wrong.json"), JSON.stringify({ ...TSCONFIG, compilerOptions: { ...TSCONFIG.compilerOptions, noEmit: true }, files: ["wrong.ts"] }));
    fs.writeFileSync(path.join(project, "index.ts"), SAMPLE);
    fs.writeFileSync(path.join(project, "wrong.ts"), WRONG);
  }, 180_000);
  afterAll(() => removeTempDirs());

  it("ships compiled code with its types, and eventsource-parser as a dependency", () => {
    const sdk = path.join(project, "node_modules/@svc/sdk");
    expect(fs.existsSync(path.join(sdk, "dist/index.js"))).toBe(true);
    expect(fs.existsSync(path.join(sdk, "dist/index.d.ts"))).toBe(true);
    expect(fs.existsSync(path.join(project, "node_modules/eventsource-parser"))).toBe(true);
  });

  it("type-checks a strict app that switches on event kinds, and refuses one that reads a field the kind lacks", async () => {
    await execFileAsync(process.execPath, [TSC, "-p", "tsconfig.json"], { cwd: project }).catch((err) => {
      throw new Error(`the sample app does not type-check:\n${err.stdout}${err.stderr}`);
    });
    const wrong = await execFileAsync(process.execPath, [TSC, "-p", "tsconfig.wrong.json"], { cwd: project }).then(
      () => null,
      (err) => err as { code: number; stdout: string },
    );
    expect(wrong, "the wrong sample type-checked").not.toBeNull();
    expect(wrong!.stdout).toMatch(/wrong\.ts.*error TS2339: Property 'text' does not exist on type/);
  }, 120_000);

  it("drives runs from the installed package: answers, a dropped stream re-attached, a handback, a typed refusal", async () => {
    if (!fs.existsSync(path.join(project, "out/index.js"))) await execFileAsync(process.execPath, [TSC, "-p", "tsconfig.json"], { cwd: project });
    const { server, requests } = scriptedServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
      const { stdout } = await execFileAsync(process.execPath, ["out/index.js"], { cwd: project, env: { ...process.env, SVC_API_KEY: "sk_svc_test.key", SVC_BASE_URL: base } });
      expect(JSON.parse(stdout)).toEqual([
        "id:run_1",
        "run_started:user-hardware:mch_1",
        "approval_request:tool:get_weather",
        "tool_call:get_weather:call_1",
        "text_delta:Sunny, 21C",
        "usage:10",
        "run_completed:Sunny, 21C:end_turn",
        "result:completed:Sunny, 21C:9:user-hardware",
        "result:handed_back:served offline for alice:app:run_2",
        "error:402:allowance_exhausted:run_3",
      ]);

      const calls = requests.map((r) => `${r.method} ${r.url}`);
      expect(calls.filter((c) => c === "POST /v1/runs")).toHaveLength(3); // never retried
      expect(calls.filter((c) => c.endsWith("/approval"))).toHaveLength(1);
      expect(calls.filter((c) => c.endsWith("/tool_result"))).toHaveLength(1);
      const create = requests.find((r) => r.url === "/v1/runs")!;
      expect(create.headers).toMatchObject({ authorization: "Bearer sk_svc_test.key", accept: "text/event-stream" });
      expect(create.body).toEqual({
        user: "alice",
        prompt: "weather in Paris?",
        model: "auto",
        tools: [{ name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } }, needsApproval: true }],
      });
      expect(requests.find((r) => r.url.endsWith("/approval"))!.body).toEqual({ approvalId: "apr_1", user: "alice", decision: "allow" });
      expect(requests.find((r) => r.url.endsWith("/tool_result"))!.body).toEqual({
        callId: "call_1",
        user: "alice",
        result: { city: "Paris", tempC: 21, callId: "call_1", aborted: false },
      });
      expect(requests.find((r) => r.url.endsWith("/events"))!.headers["last-event-id"]).toBe("3");
      expect(requests.find((r) => r.url === "/v1/runs/run_2/usage")!.body).toEqual({ user: "alice", inputTokens: 3, outputTokens: 4, model: "gpt-x" });
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  }, 60_000);
});
