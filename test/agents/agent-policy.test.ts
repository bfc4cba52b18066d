import fs from "node:fs";
import path from "node:path";
import { PassThrough } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import { spawnWorker } from "../helpers/worker.js";
import { removeTempDirs, tempDir } from "../helpers/process.js";
import { machinePolicy } from "../../worker/src/policy/index.js";
import { Policy } from "../../worker/src/policy/schema.js";
import { confirmAtTerminal } from "../../worker/src/policy/confirm.js";

/**
 * The end user's policy for agent CLIs: `svc-worker policy` (a real process on a
 * real config folder) shows and changes it; the gate applies it to every
 * permission request before the app is asked.
 */
describe("the end user's policy", () => {
  afterAll(() => removeTempDirs());

  async function policy(home: string, ...args: string[]) {
    const w = spawnWorker(["policy", ...args], home);
    const { code } = await w.exited;
    return { code, out: w.stdout, err: w.stderr };
  }
  const config = (home: string) => JSON.parse(fs.readFileSync(path.join(home, "config.json"), "utf8")) as { policy?: Record<string, unknown> };

  it("shows every setting in plain words, the defaults safe: no agent CLI served, sandbox required, network off, summaries only", async () => {
    const home = tempDir("svc-policy-");
    const { code, out } = await policy(home);
    expect(code).toBe(0);
    expect(out).toContain("agents.claude-code = false (default)");
    expect(out).toContain("agents.codex = false (default)");
    expect(out).toContain("sandbox.required = true (default)");
    expect(out).toContain("sandbox.network = false (default)");
    expect(out).toContain("decide.network = machine (default)");
    expect(out).toContain("commandOutput = summary (default)");
    expect(out).toMatch(/Sandbox here: bubblewrap/);
  });

  it("changes one setting at a time; a bad key or value is refused with exit 2 and changes nothing; reset restores the default", async () => {
    const home = tempDir("svc-policy-");
    expect((await policy(home, "set", "agents.claude-code", "true")).code).toBe(0);
    expect((await policy(home, "set", "decide.command", "machine")).code).toBe(0);
    expect((await policy(home, "set", "env", "+AWS_PROFILE")).code).toBe(0);
    expect((await policy(home, "set", "env", "+LANGUAGE")).code).toBe(0);
    expect((await policy(home, "set", "env", "-AWS_PROFILE")).code).toBe(0);
    const before = fs.readFileSync(path.join(home, "config.json"), "utf8");
    expect(config(home).policy).toMatchObject({ agents: { "claude-code": true }, decide: { command: "machine" }, env: ["LANGUAGE"] });

    const badValue = await policy(home, "set", "decide.command", "sometimes");
    expect(badValue.code).toBe(2);
    expect(badValue.err).toContain("decide.command cannot be \"sometimes\"");
    expect((await policy(home, "set", "sandbox.network", "yes")).code).toBe(2);
    expect((await policy(home, "set", "env", "+NOT A NAME")).code).toBe(2);
    const badKey = await policy(home, "set", "sandbox.everything", "false");
    expect(badKey.code).toBe(2);
    expect(badKey.err).toContain("Unknown setting sandbox.everything");
    expect(fs.readFileSync(path.join(home, "config.json"), "utf8")).toBe(before);

    expect((await policy(home, "reset", "decide.command")).code).toBe(0);
    expect(Policy.parse(config(home).policy ?? {})).toMatchObject({ decide: { command: "app" }, agents: { "claude-code": true } });
    expect((await policy(home, "reset")).code).toBe(0);
    expect(Policy.parse(config(home).policy ?? {}).agents["claude-code"]).toBe(false);
  });

  it("the gate: refuse and allow are decided on the machine without asking the app; machine needs someone at the terminal; app asks the app", async () => {
    const asked: string[] = [];
    const askApp = async (req: { tool: string }) => (asked.push(req.tool), { allow: true });
    const gate = machinePolicy(Policy.parse({ decide: { read: "allow", write: "refuse", command: "machine", other: "app" } })).gate(askApp);
    expect(await gate({ requestId: "1", tool: "Read", input: { file_path: "a" } })).toEqual({ allow: true });
    expect(await gate({ requestId: "2", tool: "Write", input: { file_path: "a" } })).toEqual({ allow: false, message: "Refused by the policy of the user's machine." });
    expect(await gate({ requestId: "3", tool: "file_change", input: {} })).toMatchObject({ allow: false });
    // The test runner has no terminal: nobody can confirm, so it is refused.
    expect(await gate({ requestId: "4", tool: "Bash", input: { command: "ls" } })).toEqual({ allow: false, message: "The user must confirm this on their machine, and no one is at its terminal." });
    expect(await gate({ requestId: "5", tool: "mcp__other__thing", input: {} })).toEqual({ allow: true });
    expect(asked).toEqual(["mcp__other__thing"]);
  });

  it("confirming at the terminal: y allows, anything else or silence refuses, one question at a time", async () => {
    const tty = () => Object.assign(new PassThrough(), { isTTY: true });
    const output = new PassThrough();
    output.resume();
    const a = tty();
    const yes = confirmAtTerminal("Allow ls?", { input: a, output });
    a.write("y\n");
    expect(await yes).toBe(true);
    const b = tty();
    const no = confirmAtTerminal("Allow rm?", { input: b, output });
    b.write("sure\n");
    expect(await no).toBe(false);
    const silent = confirmAtTerminal("Allow curl?", { input: tty(), output }, 200);
    expect(await silent).toBe(false);
    expect(confirmAtTerminal("No terminal?", { input: new PassThrough(), output })).toBeNull();
  });
});
