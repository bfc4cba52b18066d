import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TOOLS_DIR } from "../../scripts/test-tools.mjs";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { removeTempDirs } from "../helpers/process.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";

/**
 * Chat completions with the OpenAI Agents SDK (`@openai/agents`, its newest major, from
 * test/tools), pointed at the real server on each database. The service has no
 * `/v1/responses` yet, so the Agents SDK is used on chat completions: an
 * `OpenAIChatCompletionsModel` over an `openai` client with the service's base URL and an app
 * key, or the same client as its default with `setOpenAIAPI("chat_completions")`. The end user
 * goes in `modelSettings.providerData` (`safety_identifier`, or `user`): the Agents SDK has no
 * setting of its own for it. `auto` goes to a real worker process serving the model stand-in,
 * which answers a request offering tools with a call of the first one (`{"city":"Paris"}`), and
 * one carrying the tool's result with `The tool said: <result>`. What the service refuses (no
 * user, a user without a machine) reaches the app as the `openai` client's own errors, thrown by
 * `run()`, not retried.
 *
 * The Agents SDK needs zod 4 (the service is held on zod 3), so it runs in a child process:
 * test/tools/agents-client.mjs, resolving its own node_modules there.
 */

const execFileAsync = promisify(execFile);
const CLIENT = path.join(TOOLS_DIR, "agents-client.mjs");

interface Sent {
  method: string;
  path: string;
  body: {
    model: string;
    user?: string;
    safety_identifier?: string;
    stream?: boolean;
    stream_options?: { include_usage?: boolean };
    tools?: { type: string; function: { name: string; parameters: { properties: Record<string, unknown> } } }[];
    messages: { role: string; content?: unknown; tool_call_id?: string; tool_calls?: { id: string; function: { name: string; arguments: string } }[] }[];
  };
}
interface CaseResult {
  finalOutput: string;
  calls: { input: unknown; callId: string | null }[];
  items: string[];
  usage: { requests: number; inputTokens: number; outputTokens: number; totalTokens: number };
  sent: Sent[];
  statuses: { status: number; runId: string | null }[];
  deltas?: string[];
  events?: string[];
  error?: { name: string | null; message: string; status: number | null; code: string | null; param: string | null; type: string | null };
}
interface Case {
  name: string;
  user: string;
  model: string;
  input: string;
  stream?: boolean;
  via?: "model" | "defaults";
  userField?: "safety_identifier" | "user" | "none";
}

onEachDatabase("chat completions with the OpenAI Agents SDK on $db.name", (db) => {
  let server: TestServer;
  let model: ModelStandIn;
  let worker: WorkerProcess;

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    model = await startModelStandIn();
    worker = await startModelMachine(server, server.dev, "alice", model.url);
  }, 60_000);
  afterAll(async () => {
    worker?.stop();
    await server?.close();
    await model?.close();
    removeTempDirs();
  });

  /**
   * The Agents SDK's runs of `cases`, one after another in one process of its own (Node 24, the
   * service's; one start of the Agents SDK for several cases): what each returned or threw, by name.
   */
  async function agents(cases: Case[]): Promise<Record<string, CaseResult>> {
    const arg = JSON.stringify({ baseURL: `${server.url}/v1`, apiKey: server.dev.appKey, cases });
    const { stdout, stderr } = await execFileAsync(process.execPath, [CLIENT, arg], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, timeout: 90_000 }).catch((err: Error & { stdout?: string; stderr?: string }) => {
      throw new Error(`agents-client.mjs failed: ${err.message}\n${err.stdout ?? ""}\n${err.stderr ?? ""}`);
    });
    expect(stderr).toBe("");
    return (JSON.parse(stdout) as { cases: Record<string, CaseResult> }).cases;
  }
  /** A case's result, which must have succeeded. */
  function ok(out: CaseResult): CaseResult {
    expect(out.error, JSON.stringify(out.error)).toBeUndefined();
    return out;
  }
  /** The runs the service recorded for the answers' run ids, with their user and usage rows. */
  const runsOf = (ids: (string | null)[]) =>
    server.db.prisma.run.findMany({ where: { id: { in: ids.filter((x): x is string => x !== null) } }, include: { endUser: true, usageRows: true }, orderBy: { createdAt: "asc" } });

  /** What every case must show: two model turns, the tool run by the Agents SDK in between, both runs the user's. */
  async function expectToolLoop(out: CaseResult, user: string, userField: "safety_identifier" | "user", stream: boolean) {
    expect(out.finalOutput).toBe("The tool said: sunny in Paris");
    // The Agents SDK ran the tool itself, with the arguments the model sent, under the model's call id.
    expect(out.calls).toEqual([{ input: { city: "Paris" }, callId: "call_1" }]);
    expect(out.items).toEqual(["tool_call_item", "tool_call_output_item", "message_output_item"]);
    // Two turns of the stand-in, 12 in and 7 out each.
    expect(out.usage).toEqual({ requests: 2, inputTokens: 24, outputTokens: 14, totalTokens: 38 });

    // What it sent: two chat completions, the user in the field asked for, the tool offered both times,
    // the second carrying the call and the tool's result back.
    expect(out.sent.map((s) => [s.method, s.path])).toEqual([
      ["POST", "/v1/chat/completions"],
      ["POST", "/v1/chat/completions"],
    ]);
    for (const s of out.sent) {
      expect(s.body).toMatchObject({ model: "auto", [userField]: user, stream });
      expect(s.body[userField === "user" ? "safety_identifier" : "user"]).toBeUndefined();
      if (stream) expect(s.body.stream_options).toEqual({ include_usage: true });
      expect(s.body.tools?.map((t) => [t.type, t.function.name, Object.keys(t.function.parameters.properties)])).toEqual([["function", "weather", ["city"]]]);
    }
    const second = out.sent[1].body.messages;
    expect(second.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool"]);
    expect(second[2].tool_calls?.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual([["call_1", "weather", { city: "Paris" }]]);
    expect(second[3]).toMatchObject({ role: "tool", tool_call_id: "call_1", content: "sunny in Paris" });

    // Both answered 200, each its own run, both the user's, completed on their machine and metered.
    expect(out.statuses.map((s) => s.status)).toEqual([200, 200]);
    const ids = out.statuses.map((s) => s.runId);
    expect(new Set(ids).size).toBe(2);
    const runs = await runsOf(ids);
    expect(runs.map((r) => [r.id, r.endUser.externalId, r.source, r.status, r.routeKind, r.runtimeName, Number(r.inputTokens), Number(r.outputTokens)])).toEqual(
      ids.map((id) => [id, user, "chat", "completed", "user-hardware", "ollama", 12, 7]),
    );
    for (const r of runs) expect(r.usageRows.map((u) => u.costClass)).toContain("user_hardware");
  }

  describe("what works", () => {
    let out: Record<string, CaseResult>;
    let sent: number;
    beforeAll(async () => {
      sent = model.requests.length;
      out = await agents([
        { name: "run", user: "alice", model: "auto", input: "What is the weather in Paris?" },
        { name: "stream", user: "alice", model: "auto", input: "Stream me the weather in Paris.", stream: true },
        { name: "defaults", user: "alice", model: "auto", input: "Weather in Paris, by default?", via: "defaults", userField: "user" },
      ]);
    }, 120_000);

    it("run(agent, input): the final output, the tool executed by the Agents SDK with the model's arguments, both turns the user's (safety_identifier)", async () => {
      await expectToolLoop(ok(out.run), "alice", "safety_identifier", false);
      // What reached the user's model (two turns per case): the conversation as the Agents SDK wrote it.
      expect(model.requests.length).toBe(sent + 6);
      expect((model.requests[sent + 1] as { messages: { role: string }[] }).messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool"]);
    });

    it("run(agent, input, { stream: true }): text deltas arrive and make the final output; the same tool loop, streamed", async () => {
      const streamed = ok(out.stream);
      await expectToolLoop(streamed, "alice", "safety_identifier", true);
      expect(streamed.deltas!.length).toBeGreaterThan(1);
      expect(streamed.deltas!.join("")).toBe("The tool said: sunny in Paris");
      expect(streamed.events).toEqual(["tool_called", "tool_output", "message_output_created"]);
    });

    it('the Agents SDK\'s defaults: setOpenAIAPI("chat_completions") and the client as default, the model by name, the user as `user`', async () => {
      await expectToolLoop(ok(out.defaults), "alice", "user", false);
    });
  });

  describe("what is refused", () => {
    let out: Record<string, CaseResult>;
    let runsBefore: number;
    beforeAll(async () => {
      runsBefore = await server.db.prisma.run.count();
      out = await agents([
        { name: "no-user", user: "", model: "auto", input: "Whose weather is it?", userField: "none" },
        { name: "agents-nobody-plain", user: "agents-nobody-plain", model: "auto", input: "Weather for nobody?" },
        { name: "agents-nobody-streamed", user: "agents-nobody-streamed", model: "auto", input: "Weather for nobody, streamed?", stream: true },
      ]);
    }, 120_000);

    it("without a user (nothing in providerData): run() throws the openai client's BadRequestError, 400 invalid_request naming `user`; one request, not retried, no run", async () => {
      const r = out["no-user"];
      expect(r.error).toMatchObject({ name: "BadRequestError", status: 400, code: "invalid_request", param: "user", type: "invalid_request_error" });
      expect(r.error!.message).toMatch(/`user`, or `safety_identifier`/);
      expect(r.sent).toHaveLength(1);
      expect(r.sent[0].body.user ?? r.sent[0].body.safety_identifier).toBeUndefined();
      expect(r.statuses).toEqual([{ status: 400, runId: null }]);
      expect(r.calls).toEqual([]);
      // The two runs of the next case only.
      expect(await server.db.prisma.run.count()).toBe(runsBefore + 2);
    });

    it("a user with no machine, plain and streamed: run() throws ConflictError, 409 serve_in_app naming the run to report usage to; one request each (not retried), the run counted as app_served", async () => {
      for (const user of ["agents-nobody-plain", "agents-nobody-streamed"]) {
        const r = out[user];
        expect(r.error, user).toMatchObject({ name: "ConflictError", status: 409, code: "serve_in_app", type: "routing_error" });
        expect(r.statuses, user).toHaveLength(1);
        const [{ status, runId }] = r.statuses;
        expect(status, user).toBe(409);
        expect(r.sent[0].body.stream, user).toBe(user.endsWith("streamed"));
        expect(r.error!.message, user).toContain("has no reachable model runtime for model auto");
        expect(r.error!.message, user).toContain(`report its usage to POST /v1/runs/${runId}/usage`);
        expect(r.calls, user).toEqual([]);
        const runs = await runsOf([runId]);
        expect(runs.map((x) => [x.endUser.externalId, x.usageRows.map((u) => [u.kind, u.costClass])]), user).toEqual([[user, [["run", "app_served"]]]]);
      }
    });
  });
});
