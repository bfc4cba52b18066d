import { spawnSync } from "node:child_process";
import fs from "node:fs";
import type { AgentProcess, Launched, SandboxKind } from "../runtimes/runtime.js";
import { confinementOf } from "./confinement.js";
import { which } from "./launchable.js";
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
  /** Which kind of none: not installed (`sandbox_missing`), or installed and refused its namespaces by the host (`sandbox_refused`). */
  code?: "sandbox_missing" | "sandbox_refused";
  /** What the user can do about it, in a command or two. */
  fix?: string;
}

const UNCONFINED = "or accept running agent CLIs unconfined here: svc-worker policy set sandbox.required false";

const SEATBELT = "/usr/bin/sandbox-exec";

let detected: SandboxInfo | undefined;
/** The bubblewrap `detected` was found with: bubblewrap installed (or removed) while the worker runs is noticed. */
let detectedWith: string | undefined | null = null;

/**
 * Which sandbox agent CLIs can run in here, found once per process (again when `bwrap` on PATH changed). Linux:
 * bubblewrap, if it is installed and can actually create the namespaces the
 * launcher uses (it cannot inside some containers, or where unprivileged user
 * namespaces are disabled): tried once with them all. macOS: Seatbelt
 * (`sandbox-exec`, part of the system). Elsewhere: none.
 */
export function detectSandbox(): SandboxInfo {
  const bwrap = process.platform === "linux" ? which("bwrap", process.env.PATH) : undefined;
  if (detected && bwrap === detectedWith) return detected;
  detectedWith = bwrap;
  if (process.platform === "linux") {
    if (!bwrap) {
      detected = { kind: null, code: "sandbox_missing", why: "bubblewrap is not installed (the `bubblewrap` package provides `bwrap`)", fix: `install bubblewrap (Debian, Ubuntu: sudo apt install bubblewrap; Fedora: sudo dnf install bubblewrap), ${UNCONFINED}` };
    } else {
      // Inside, bubblewrap itself (by its absolute path) says its version: a program that is surely there, whatever PATH holds.
      const tried = spawnSync(bwrap, ["--ro-bind", "/", "/", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--", fs.realpathSync(bwrap), "--version"], { encoding: "utf8", timeout: 10_000 });
      detected =
        tried.status === 0
          ? { kind: "bubblewrap", command: bwrap }
          : {
              kind: null,
              code: "sandbox_refused",
              why: `bubblewrap is installed but this host does not let it create its namespaces: ${(tried.stderr || tried.error?.message || `exit ${tried.status}`).trim()}`,
              fix: `allow unprivileged user namespaces (Ubuntu 24.04 and later restrict them through AppArmor: give bwrap an AppArmor profile with \`userns,\`; elsewhere: sudo sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces above 0; in a container: run it with user namespaces allowed), ${UNCONFINED}`,
            };
    }
  } else if (process.platform === "darwin") {
    detected = fs.existsSync(SEATBELT) ? { kind: "seatbelt", command: SEATBELT } : { kind: null, code: "sandbox_missing", why: `${SEATBELT} is missing`, fix: UNCONFINED };
  } else {
    detected = { kind: null, code: "sandbox_missing", why: `no sandbox is supported on ${process.platform}`, fix: UNCONFINED };
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
