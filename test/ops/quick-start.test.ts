import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASES } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ROOT, removeTempDirs, tempDir } from "../helpers/process.js";

/**
 * README's "Quick start for app developers", as written: its `sh` blocks, in
 * order, fed to one bash (as if pasted line by line into one terminal) against
 * a started service. The only changes are the placeholders a reader fills in
 * (the banner's keys) and the addresses (the test's ports). The one step a
 * person does, approving the pairing on the connect page, is done through the
 * API, as the README says.
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

  it("works pasted block by block into one shell", async () => {
    const blocks = quickStartBlocks();
    expect(blocks.length).toBe(5);
    const appPort = await freePort();
    const fill = (text: string) =>
      text
        .replaceAll("sk_svc_...", server.dev.appKey)
        .replaceAll("pk_svc_...", server.dev.connectKey)
        .replaceAll("http://127.0.0.1:4000", server.url)
        .replaceAll("http://127.0.0.1:3000", `http://127.0.0.1:${appPort}`);
    const home = tempDir("svc-quick-start-");
    const shell = spawn("bash", ["-s"], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: home, APP_PORT: String(appPort), npm_config_cache: path.join(home, ".npm"), npm_config_update_notifier: "false" },
      stdio: ["pipe", "pipe", "pipe"],
      detached: true,
    });
    // Job control, as in a terminal: a background job is its own process group, so `kill %1` stops npm and the app under it.
    shell.stdin!.write("set -m\n");
    let out = "";
    shell.stdout!.on("data", (c) => (out += c));
    shell.stderr!.on("data", (c) => (out += c));
    const waitFor = async (re: RegExp, from: number, ms: number) => {
      const deadline = Date.now() + ms;
      for (;;) {
        const m = re.exec(out.slice(from));
        if (m) return m;
        if (Date.now() > deadline) throw new Error(`waited for ${re} in vain; the shell said:\n${out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    /** Pastes one block, then waits until the shell has run it; what it printed. */
    const paste = async (n: number, during?: (from: number) => Promise<void>) => {
      const from = out.length;
      shell.stdin!.write(`${fill(blocks[n])}\necho "__block_${n}_done__"\n`);
      if (during) await during(from);
      await waitFor(new RegExp(`__block_${n}_done__`), from, 120_000);
      return out.slice(from);
    };
    try {
      await paste(0);

      // 2. Pairing: the person's step (enter the code, Approve) through the API, with the session the block minted.
      const paired = await paste(1, async (from) => {
        const session = (await waitFor(/"session":"(est_[^"]+)"/, from, 30_000))[1];
        const code = (await waitFor(/one-time code: ([A-Z]{4}-[A-Z]{4})/, from, 60_000))[1];
        const res = await server.fetch("/v1/device/approve", { method: "POST", headers: { authorization: `Bearer ${session}`, "content-type": "application/json" }, body: JSON.stringify({ user_code: code }) });
        expect(res.status, await res.clone().text()).toBe(200);
      });
      expect(paired).toMatch(/"url":"http:\/\/127\.0\.0\.1:\d+\/connect#session=est_/);
      const machines = await (await server.fetch("/v1/users/alice/compute", { headers: { authorization: `Bearer ${server.dev.appKey}` } })).json();
      expect(machines.machines).toHaveLength(1);

      const ran = await paste(2);
      const result = jsonLines(ran).find((j) => "events" in j)!;
      expect(result).toMatchObject({ status: "completed", route: "service", model: "svc/echo", output: "Done: sent to team@example.com." });
      expect(result.events).toEqual(expect.arrayContaining(["tool_call", "approval_request"]));

      const chat = await paste(3);
      expect(jsonLines(chat)[0]).toMatchObject({ object: "chat.completion", model: "svc/echo", choices: [{ message: { content: "Hello, svc" } }] });

      const read = await paste(4);
      const [usage, user] = jsonLines(read);
      expect(usage.data.length).toBeGreaterThanOrEqual(5);
      expect(usage.data.every((r: { costClass: string }) => r.costClass === "free")).toBe(true);
      expect(usage.data.map((r: { kind: string }) => r.kind)).toEqual(expect.arrayContaining(["echo", "tokens"]));
      expect(user).toMatchObject({ id: "alice" });
      // `kill %1` stopped the example app.
      const gone = async () => {
        for (let i = 0; i < 100; i++) {
          if (!(await fetch(`http://127.0.0.1:${appPort}/`).then(() => true, () => false))) return true;
          await new Promise((r) => setTimeout(r, 100));
        }
        return false;
      };
      expect(await gone(), out).toBe(true);
    } finally {
      shell.stdin!.end();
      try {
        process.kill(-shell.pid!, "SIGTERM");
      } catch {}
    }
  }, 240_000);
});
