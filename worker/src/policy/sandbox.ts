import { spawnSync } from "node:child_process";
import fs from "node:fs";
import type { AgentProcess, Launched, SandboxKind } from "../runtimes/runtime.js";
import { confinementOf, which } from "./confinement.js";
import type { Policy } from "./schema.js";
import { launchInBubblewrap } from "./sandbox-linux.js";
import { launchInSeatbelt } from "./sandbox-macos.js";

/** The operating-system sandbox this machine offers agent CLIs. */
export interface SandboxInfo {
  kind: SandboxKind | null;
  /** The sandbox's program. */
  command?: string;
  /** Why there is none. */
  why?: string;
}

const SEATBELT = "/usr/bin/sandbox-exec";

let detected: SandboxInfo | undefined;

/**
 * Which sandbox agent CLIs can run in here, found once per process. Linux:
 * bubblewrap, if it is installed and can actually create the namespaces the
 * launcher uses (it cannot inside some containers, or where unprivileged user
 * namespaces are disabled): tried once with them all. macOS: Seatbelt
 * (`sandbox-exec`, part of the system). Elsewhere: none.
 */
export function detectSandbox(): SandboxInfo {
  if (detected) return detected;
  if (process.platform === "linux") {
    const bwrap = which("bwrap", process.env.PATH);
    if (!bwrap) detected = { kind: null, why: "bubblewrap is not installed (the `bubblewrap` package provides `bwrap`)" };
    else {
      const tried = spawnSync(bwrap, ["--ro-bind", "/", "/", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "true"], { encoding: "utf8", timeout: 10_000 });
      detected =
        tried.status === 0
          ? { kind: "bubblewrap", command: bwrap }
          : { kind: null, why: `bubblewrap cannot create namespaces here: ${(tried.stderr || tried.error?.message || `exit ${tried.status}`).trim()}` };
    }
  } else if (process.platform === "darwin") {
    detected = fs.existsSync(SEATBELT) ? { kind: "seatbelt", command: SEATBELT } : { kind: null, why: `${SEATBELT} is missing` };
  } else {
    detected = { kind: null, why: `no sandbox is supported on ${process.platform}` };
  }
  return detected;
}

/**
 * The sandbox `launchAgent` starts agent CLIs in on this machine (the same
 * test as its own), or `null` where there is none (then they run unconfined if
 * the policy accepts that, and not at all otherwise).
 */
export function sandboxOf(sandbox: SandboxInfo = detectSandbox()): SandboxKind | null {
  return sandbox.kind !== null && sandbox.command ? sandbox.kind : null;
}

/**
 * Starts an agent CLI as the user's policy says: inside the machine's sandbox
 * with `env` (the allowlisted environment: the only one that reaches it), or,
 * where there is no sandbox, unconfined only if the user accepted that
 * (`sandbox.required: false`); otherwise it refuses, saying why.
 */
export async function launchAgent(p: AgentProcess, policy: Policy, env: NodeJS.ProcessEnv, sandbox: SandboxInfo = detectSandbox()): Promise<Launched> {
  if (sandbox.kind === null || !sandbox.command) {
    if (policy.sandbox.required) {
      throw new Error(`Agent CLIs run only inside a sandbox on this machine, and there is none: ${sandbox.why ?? "unknown"}. The user may accept running them unconfined (svc-worker policy: sandbox.required false).`);
    }
    return { command: p.command, args: p.args, cwd: p.cwd, env };
  }
  const confinement = confinementOf(p, policy, env);
  const launched = sandbox.kind === "bubblewrap" ? await launchInBubblewrap(sandbox.command, confinement, p.args, env) : await launchInSeatbelt(sandbox.command, confinement, p.args, env);
  return { ...launched, sandbox: sandbox.kind };
}
