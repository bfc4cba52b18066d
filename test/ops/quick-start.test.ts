import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASES } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { pollUntil, ROOT, removeTempDirs, tempDir } from "../helpers/process.js";

/**
 * README's "Quick start for app developers", as written: its `sh` blocks, in
 * order, fed to non-interactive bash shells (as if pasted into terminals) against
 * a started service: one for the app developer, and the "second terminal" the
 * README names for the end user's machine. The only changes are the placeholders
 * a reader fills in (the banner's keys, the one-time code the worker printed) and
 * the addresses (the test's ports). The second terminal gets step 1's exports
 * pasted too, as step 3 says.
 */
const { db } = DATABASES[0];

function quickStartBlocks(): string[] {
  const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");
  const start = readme.indexOf("## Quick start for app developers");
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

/** The JSON objects a block printed, one per line (curl -w '\n'). */
function jsonLines(text: string): Record<string, any>[] {
  return text.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** A non-interactive bash reading what is pasted into it, its output gathered. */
function terminal(env: NodeJS.ProcessEnv) {
  const shell = spawn("bash", ["-s"], { cwd: ROOT, env, stdio: ["pipe", "pipe", "pipe"], detached: true });
  const t = {
    out: "",
    async waitFor(re: RegExp, from: number, ms: number) {
      const deadline = Date.now() + ms;
      for (;;) {
        const m = re.exec(t.out.slice(from));
        if (m) return m;
        if (Date.now() > deadline) throw new Error(`waited for ${re} in vain; the shell said:\n${t.out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    /** Pastes text; with `marker`, waits until the shell has run it. What it printed. */
    async paste(text: string, marker?: string) {
      const from = t.out.length;
      shell.stdin!.write(marker ? `${text}\necho "${marker}"\n` : `${text}\n`);
      if (marker) await t.waitFor(new RegExp(marker), from, 120_000);
      return t.out.slice(from);
    },
    close() {
      shell.stdin!.end();
      try {
        process.kill(-shell.pid!, "SIGTERM");
      } catch {}
    },
  };
  shell.stdout!.on("data", (c) => (t.out += c));
  shell.stderr!.on("data", (c) => (t.out += c));
  return t;
}

describe("README's quick start for app developers", () => {
  let server: TestServer;
  const workerFile = path.join(ROOT, "svc-worker.mjs");
  const hadWorkerFile = fs.existsSync(workerFile);

  beforeAll(async () => {
    server = await startTestServerOn(db, {}, { runningClock: true });
  }, 60_000);
  afterAll(async () => {
    if (!hadWorkerFile) fs.rmSync(workerFile, { force: true });
    await server?.close();
    removeTempDirs();
  });

  it("works pasted block by block into two non-interactive shells", async () => {
    const blocks = quickStartBlocks();
    expect(blocks.length).toBe(7);
    const appPort = await freePort();
    let code = "BCDF-GHJK";
    const fill = (text: string) =>
      text
        .replaceAll("sk_svc_...", server.dev.appKey)
        .replaceAll("pk_svc_...", server.dev.connectKey)
        .replaceAll("http://127.0.0.1:4000", server.url)
        .replaceAll("http://127.0.0.1:3000", `http://127.0.0.1:${appPort}`)
        .replaceAll("BCDF-GHJK", code);
    const home = tempDir("svc-quick-start-");
    const env = { PATH: process.env.PATH, HOME: home, APP_PORT: String(appPort), npm_config_cache: path.join(home, ".npm"), npm_config_update_notifier: "false" };
    const first = terminal(env);
    // The end user's machine: its own shell, with none of the first one's variables.
    const second = terminal({ PATH: process.env.PATH, HOME: tempDir("svc-quick-start-machine-") });
    const paste = (n: number) => first.paste(fill(blocks[n]), `__block_${n}_done__`);
    const appKey = { authorization: `Bearer ${server.dev.appKey}` };
    const compute = async () => (await server.fetch("/v1/users/alice/compute", { headers: appKey })).json();
    try {
      await paste(0);

      // 2. The session, printed and captured.
      const minted = await paste(1);
      expect(jsonLines(minted)[0]).toMatchObject({ session: expect.stringMatching(/^est_/), url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/connect#session=est_/) });

      // 3. The second terminal: step 1's exports pasted there too (the connect key), then download, pair (it waits for the approval), start.
      expect(blocks[2], "step 3 uses the connect key step 1 exported, not a placeholder").toContain("$SVC_CONNECT_KEY");
      await second.paste(fill(blocks[0]), "__exports_done__");
      await second.paste(fill(blocks[2]));
      code = (await second.waitFor(/one-time code: ([A-Z]{4}-[A-Z]{4})/, 0, 60_000))[1];

      // 4. The approval, with the session captured in step 2 and the code the worker printed.
      const approved = await paste(3);
      expect(jsonLines(approved)[0]).toEqual({ user_code: code, status: "approved" });
      await second.waitFor(/Connected/, 0, 60_000);
      await pollUntil(async () => (await compute()).machines[0]?.state, (s) => s === "online", 20_000, "alice's machine online");
      const { machines } = await compute();
      expect(machines).toHaveLength(1);

      // 5. With alice's machine online but serving nothing, the example app runs on svc/echo.
      const ran = await paste(4);
      const result = jsonLines(ran).find((j) => "events" in j)!;
      expect(result).toMatchObject({ status: "completed", route: "service", model: "svc/echo", output: "Done: sent to team@example.com." });
      expect(result.events).toEqual(expect.arrayContaining(["tool_call", "approval_request"]));

      const chat = await paste(5);
      expect(jsonLines(chat)[0]).toMatchObject({ object: "chat.completion", model: "svc/echo", choices: [{ message: { content: "Hello, svc" } }] });

      const read = await paste(6);
      const [usage, user] = jsonLines(read);
      expect(usage.data.length).toBeGreaterThanOrEqual(5);
      expect(usage.data.every((r: { costClass: string }) => r.costClass === "free")).toBe(true);
      expect(usage.data.map((r: { kind: string }) => r.kind)).toEqual(expect.arrayContaining(["echo", "tokens"]));
      expect(user).toMatchObject({ id: "alice" });
      // `kill $EXAMPLE_PID` stopped the example app (the check that it had answered is step 5's result).
      const gone = async () => {
        for (let i = 0; i < 100; i++) {
          if (!(await fetch(`http://127.0.0.1:${appPort}/`).then(() => true, () => false))) return true;
          await new Promise((r) => setTimeout(r, 100));
        }
        return false;
      };
      expect(await gone(), first.out).toBe(true);
    } finally {
      first.close();
      second.close();
    }
  }, 240_000);
});
