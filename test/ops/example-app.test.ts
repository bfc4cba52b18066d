import { spawn, type ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASES } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pollUntil, ROOT } from "../helpers/process.js";
import { pairViaApi, spawnWorker, startModelMachine, type WorkerProcess } from "../helpers/worker.js";
import { startModelStandIn, type ModelStandIn } from "../helpers/standins.js";

/**
 * The example app (`examples/app/server.ts`, `npm run example`) as a real
 * process against a real server: its sessions and hosted-page links, a run on
 * `svc/echo` calling its tools with an approval granted and one denied, a
 * handback served by its stand-in provider with the usage reported; checked
 * through the service's own API.
 */
const { db } = DATABASES[0];

describe("the example app", () => {
  let server: TestServer;
  let app: ChildProcess;
  let appUrl = "";
  let output = "";

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
    app = spawn(process.execPath, ["--conditions=svc-source", "--import", "tsx", "examples/app/server.ts"], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, SVC_BASE_URL: `${server.url}/v1`, SVC_API_KEY: server.dev.appKey, APP_PORT: "0" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    appUrl = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the example did not start:\n${output}`)), 60_000);
      const take = (chunk: Buffer) => {
        output += chunk;
        const m = /listening on (http:\/\/\S+)/.exec(output);
        if (m) (clearTimeout(timer), resolve(m[1]));
      };
      app.stdout!.on("data", take);
      app.stderr!.on("data", take);
      app.on("exit", (code) => reject(new Error(`the example exited (${code}):\n${output}`)));
    });
  }, 90_000);
  afterAll(async () => {
    app?.kill("SIGTERM");
    await server?.close();
  });

  const api = (path: string) => server.fetch(path, { headers: { authorization: `Bearer ${server.dev.appKey}` } }).then((r) => r.json());
  const postApp = (path: string, body: unknown) => fetch(`${appUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

  it("mints a session and sends the user to the hosted connect and billing pages", async () => {
    const s = await (await postApp("/session", { user: "ex-alice" })).json();
    expect(s.connectUrl).toBe(`${server.url}/connect#session=${s.session}`);
    expect(s.billingUrl).toBe(`${server.url}/billing#session=${s.session}`);
    for (const page of ["connect", "billing"]) {
      const res = await fetch(`${appUrl}/${page}?user=ex-alice`, { redirect: "manual" });
      expect(res.status).toBe(302);
      expect(res.headers.get("location")).toMatch(new RegExp(`^${server.url}/${page}#session=est_`));
      // The hosted page answers.
      expect((await server.fetch(`/${page}`)).status).toBe(200);
    }
  });

  it("runs its default script on svc/echo with no machine: the tools run in the app, the mail approved by its rule; metered free", async () => {
    const r = await (await postApp("/ask", { user: "ex-alice" })).json();
    // A run's output is its last turn's text (what came after the last tool result).
    expect(r).toMatchObject({ model: "svc/echo", status: "completed", route: "service", output: "Done: sent to team@example.com." });
    expect(r.events).toContain("approval_request");
    expect(r.events.filter((k: string) => k === "tool_call")).toHaveLength(2);
    const run = await api(`/v1/runs/${r.runId}`);
    expect(run).toMatchObject({ status: "completed", costClass: "free", turns: 3 });
    const rows = (await api(`/v1/usage?user=ex-alice&run=${r.runId}`)).data;
    expect(rows.map((x: { kind: string; costClass: string }) => [x.kind, x.costClass])).toEqual([["echo", "free"], ["tokens", "free"], ["tokens", "free"], ["tokens", "free"]]);
  });

  it("a mail outside example.com is denied by the app's approval rule; the run goes on with the denial", async () => {
    const prompt = JSON.stringify([{ call: "send_mail", arguments: { to: "eve@elsewhere.net" } }]);
    const r = await (await postApp("/ask", { user: "ex-alice", prompt })).json();
    expect(r).toMatchObject({ status: "completed", output: "Error: the user denied this call: eve@elsewhere.net is outside example.com" });
    expect(r.events).not.toContain("tool_call");
  });

  it("a run with nothing reachable is handed back, served by its stand-in provider, and the usage reported once", async () => {
    const r = await (await postApp("/ask", { user: "ex-bob", model: "auto", prompt: "summarise my week" })).json();
    expect(r).toMatchObject({ status: "handed_back", output: "[stand-in provider] summarise my week", usage: { inputTokens: 3, outputTokens: 5 } });
    const rows = (await api(`/v1/usage?user=ex-bob&run=${r.runId}`)).data;
    expect(rows.map((x: { kind: string; costClass: string; inputTokens: number; outputTokens: number }) => [x.kind, x.costClass, x.inputTokens, x.outputTokens])).toEqual([
      ["run", "app_served", 0, 0],
      ["app_usage", "app_served", 3, 5],
    ]);
    const usage = await (await fetch(`${appUrl}/usage?user=ex-bob`)).json();
    expect(usage.rows).toHaveLength(2);
    expect(usage.user).toMatchObject({ id: "ex-bob" });
  });

  describe("chooses the model as the README says", () => {
    const workers: WorkerProcess[] = [];
    let model: ModelStandIn;
    afterAll(async () => {
      for (const w of workers) w.stop();
      await model?.close();
    });

    it("svc/echo for a user whose machine is online but serves nothing; auto for a user whose machine serves a model (control)", async () => {
      // Carol's machine: paired, started, online, with no runtime at all.
      const carol = await pairViaApi(server, server.dev, "ex-carol", { runtimes: { ollama: false, llamacpp: false, lmstudio: false, claude: false, codex: false } });
      const idle = spawnWorker(["start"], carol.home);
      workers.push(idle);
      await idle.waitFor(/Connected/);
      await pollUntil(async () => (await api("/v1/users/ex-carol/compute")).machines[0]?.state, (s) => s === "online", 20_000, "carol's machine online");
      const onEcho = await (await postApp("/ask", { user: "ex-carol" })).json();
      expect(onEcho).toMatchObject({ model: "svc/echo", status: "completed", route: "service", output: "Done: sent to team@example.com." });

      // Dan's machine serves a model: the app asks for auto, and the run reaches his machine.
      model = await startModelStandIn();
      workers.push(await startModelMachine(server, server.dev, "ex-dan", model.url));
      const onMachine = await (await postApp("/ask", { user: "ex-dan", prompt: "Say hello." })).json();
      expect(onMachine).toMatchObject({ model: "auto", status: "completed", route: "user-hardware" });
    }, 90_000);
  });
});
