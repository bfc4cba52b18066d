import { spawn } from "node:child_process";
import { allowedEnv } from "../policy/index.js";
import { launchAgent, type SandboxInfo } from "../policy/sandbox.js";
import type { Policy } from "../policy/schema.js";

/** How long a CLI has to say its version inside the sandbox (a cold start on a busy laptop included). */
const PREFLIGHT_TIMEOUT_MS = 30_000;

export type Preflight = { ok: true; version: string | null } | { ok: false; message: string };

/**
 * Starts an agent CLI once exactly as a job would (the user's policy, the sandbox, the
 * allowed environment, the working folder), asking only its version: a machine never
 * advertises a CLI it cannot start. What went wrong is said in full, for the worker's
 * own terminal; what reaches the app is redacted (`redact.ts`).
 */
export async function preflightCli(command: string, o: { workdir: string; policy: Policy; env: NodeJS.ProcessEnv; sandbox?: SandboxInfo }): Promise<Preflight> {
  let launched;
  try {
    launched = await launchAgent({ command, args: ["--version"], cwd: o.workdir, env: {}, modelApis: [] }, o.policy, allowedEnv(o.policy, o.env, {}), o.sandbox);
  } catch (err) {
    return { ok: false, message: (err as Error).message };
  }
  const l = launched;
  const ran = await new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const child = spawn(l.command, l.args, { cwd: l.cwd, env: l.env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (c) => (out = (out + c).slice(-4000)));
    child.stderr.on("data", (c) => (err = (err + c).slice(-4000)));
    const timer = setTimeout(() => child.kill("SIGKILL"), PREFLIGHT_TIMEOUT_MS);
    child.on("error", (e) => ((err += e.message), clearTimeout(timer), resolve({ code: null, out, err })));
    child.on("close", (code) => (clearTimeout(timer), resolve({ code, out, err })));
  });
  await l.cleanup?.();
  const version = /(\d+\.\d+\.\d+)/.exec(ran.out)?.[1] ?? null;
  if (ran.code === 0 && version) return { ok: true, version };
  const said = (ran.err || ran.out).trim().split("\n").slice(-3).join(" ").slice(0, 400);
  return { ok: false, message: `it does not start ${l.sandbox ? `inside the ${l.sandbox} sandbox` : "here"} (${ran.code === null ? "no exit" : `exit ${ran.code}`}${said ? `: ${said}` : ""})` };
}
