import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Svc, type RunEvent } from "@svc/sdk";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { pairViaApi, spawnWorker, type WorkerProcess } from "../helpers/worker.js";
import { pollUntil, removeTempDirs, ROOT } from "../helpers/process.js";
import { detectSandbox } from "../../worker/src/policy/sandbox.js";
import { RESPONSES_USAGE, startResponsesStandIn, type ResponsesStandIn } from "../helpers/responses-standin.js";

const CODEX = path.join(ROOT, "node_modules/.bin/codex");

/**
 * The real Codex CLI (`@openai/codex` 0.169.0 from npm) on a user's machine: a
 * real `svc-worker start` drives `codex app-server` inside the sandbox, against a
 * stand-in of the OpenAI Responses API on 127.0.0.1; the app is the SDK.
 */
/** Codex runs inside the sandbox: a machine without bubblewrap skips this file, CI (SVC_TEST_SANDBOX=1) requires it. */
const sandboxed = detectSandbox().kind !== null || process.env.SVC_TEST_SANDBOX === "1";

describe.runIf(sandboxed)("the real Codex CLI through svc-worker", () => {
  let server: TestServer;
  let api: ResponsesStandIn;
  let svc: Svc;
  let worker: WorkerProcess;
  let root: string;
  let home: string;
  let workdir: string;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null }, {}, { runningClock: true });
    api = await startResponsesStandIn();
    svc = new Svc({ apiKey: server.dev.appKey, baseUrl: `${server.url}/v1` });
    // Codex will not set up its own sandbox with its home under /tmp: this test's folders live in /var/tmp.
    root = fs.mkdtempSync("/var/tmp/svc-codex-");
    home = path.join(root, "home");
    workdir = path.join(root, "project");
    fs.mkdirSync(path.join(home, ".codex"), { recursive: true });
    fs.mkdirSync(path.join(home, ".ssh"), { recursive: true });
    fs.mkdirSync(workdir);
    fs.writeFileSync(path.join(home, ".ssh", "id_rsa"), "PRIVATE-KEY-THAT-MUST-NOT-LEAK");
    fs.writeFileSync(
      path.join(home, ".codex", "config.toml"),
      `model = "standin-model"\nmodel_provider = "standin"\n[model_providers.standin]\nname = "standin"\nbase_url = "${api.url}/v1"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\n`,
    );
    const m = await pairViaApi(server, server.dev, "cody", {
      workdir,
      runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: CODEX },
      policy: { agents: { codex: true }, env: ["CODEX_HOME"], providerKeys: ["STANDIN_API_KEY"] },
    });
    worker = spawnWorker(["start"], m.home, { HOME: home, CODEX_HOME: path.join(home, ".codex"), STANDIN_API_KEY: "sk-standin", SECRET_CLOUD_TOKEN: "cloud-secret-value" });
    await worker.waitFor(/Connected/, 60_000);
  }, 120_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await api?.close();
    if (root) fs.rmSync(root, { recursive: true, force: true });
    removeTempDirs();
  });

  async function collect(stream: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const e of stream) events.push(e);
    return events;
  }
  const run = (prompt: string, extra: Partial<Parameters<Svc["runs"]["create"]>[0]> = {}) => svc.runs.create({ user: "cody", prompt, model: "codex", route: { prefer: ["user-subscription"] }, ...extra });
  const codexRunning = () => {
    try {
      return execFileSync("pgrep", ["-f", `${CODEX} app-server`]).toString().trim().length > 0;
    } catch {
      return false;
    }
  };

  it("a plain run streams Codex's text token by token, with usage that separates cached input", async () => {
    const r = run("Say hello");
    const events = await collect(r);
    const deltas = events.filter((e) => e.kind === "text_delta");
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.map((e) => (e as { text: string }).text).join("")).toBe("Hello from the Responses stand-in.");
    const end = events.at(-1) as Extract<RunEvent, { kind: "run_completed" }>;
    expect(end.kind).toBe("run_completed");
    expect(end.output).toBe("Hello from the Responses stand-in.");
    expect(end.usage).toMatchObject({ inputTokens: RESPONSES_USAGE.input_tokens - RESPONSES_USAGE.cached_tokens, outputTokens: RESPONSES_USAGE.output_tokens, costClass: "user_subscription" });
    // The CLI saw only the allowed environment: the worker's secret never reached the model API's requests.
    expect(JSON.stringify(api.requests)).not.toContain("cloud-secret-value");
  });

  it("a command Codex wants to run outside its sandbox is an approval the app decides: allowed runs, denied does not", async () => {
    const outside = path.join(root, "allowed-marker");
    const asked: string[] = [];
    const allowed = await collect(run(`[escalate:touch ${outside}]`, { onApproval: (req) => (asked.push(`${req.what}:${req.tool}`), true) }));
    expect(asked).toEqual(["permission:command_execution"]);
    expect(allowed.at(-1)!.kind).toBe("run_completed");
    const activity = allowed.find((e) => e.kind === "activity") as { summary: string; detail?: Record<string, unknown> } | undefined;
    expect(activity?.summary).toContain(`touch ${outside}`);

    const denied = path.join(root, "denied-marker");
    const events = await collect(run(`[escalate:touch ${denied}]`, { onApproval: () => false }));
    expect(events.at(-1)!.kind).toBe("run_completed");
    expect(fs.existsSync(denied)).toBe(false);
  });

  it("an app tool is offered through the MCP bridge and answered by the SDK; a needsApproval tool denied never runs", async () => {
    const seen: unknown[] = [];
    const events = await collect(run("[tool:lookup_order] Where is order 42?", { tools: [{ name: "lookup_order", description: "Finds an order.", parameters: { type: "object", properties: { id: { type: "string" } } }, run: (args) => (seen.push(args), { status: "shipped" }) }] }));
    expect(seen).toEqual([{ id: "42" }]);
    expect(events.find((e) => e.kind === "tool_call")).toMatchObject({ name: "lookup_order", arguments: { id: "42" } });
    expect((events.at(-1) as { output: string }).output).toContain("shipped");

    let ran = false;
    const denied = await collect(run("[tool:refund] Refund it", { tools: [{ name: "refund", needsApproval: true, run: () => ((ran = true), "refunded") }], onApproval: () => ({ decision: "deny", reason: "not today" }) }));
    expect(ran).toBe(false);
    expect(denied.some((e) => e.kind === "tool_call")).toBe(false);
    expect(denied.at(-1)!.kind).toBe("run_completed");
  });

  it("a file outside the working folder stays unread even when the app allows everything", async () => {
    const events = await collect(run(`[escalate:cat ${path.join(home, ".ssh", "id_rsa")}]`, { onApproval: () => true }));
    expect(JSON.stringify(events)).not.toContain("PRIVATE-KEY-THAT-MUST-NOT-LEAK");
    expect(JSON.stringify(api.requests)).not.toContain("PRIVATE-KEY-THAT-MUST-NOT-LEAK");
  });

  it("an API error fails the run with the error's own code, and its text is not run text", async () => {
    const events = await collect(run("[error:400] fail please"));
    const end = events.at(-1) as Extract<RunEvent, { kind: "run_failed" }>;
    expect(end.kind).toBe("run_failed");
    // Codex 0.169 does not pass the HTTP status on; the API's own error type is the code.
    expect(end.error.code).toBe("invalid_request_error");
    expect(end.error.message).toBe("The stand-in refused this request (400).");
    expect(events.some((e) => e.kind === "text_delta")).toBe(false);
  });

  it("cancel mid-stream interrupts the turn and leaves no codex process behind", async () => {
    const r = run("[slow] write a lot");
    const events: RunEvent[] = [];
    let cancelled = false;
    for await (const e of r) {
      events.push(e);
      if (!cancelled && events.filter((x) => x.kind === "text_delta").length === 3) {
        cancelled = true;
        await r.cancel("enough");
      }
    }
    expect(events.at(-1)!.kind).toBe("run_cancelled");
    await pollUntil(async () => codexRunning(), (running) => !running, 15_000, "codex to stop");
  });
});
