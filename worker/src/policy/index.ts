import type { AskPermission, Launch, SandboxKind } from "../runtimes/runtime.js";
import { launchAgent, sandboxOf } from "./sandbox.js";
import { confirmAtTerminal } from "./confirm.js";
import { defaultPolicy, type Policy, type RequestKind } from "./schema.js";

/** The user's policy as the connection applies it to each agent job. */
export interface MachinePolicy {
  policy: Policy;
  /** Starts an agent CLI as the policy says: inside the sandbox (sandbox.ts), with only the allowed environment. */
  launch: Launch;
  /** The environment the policy lets reach a CLI, before its runtime's own additions. */
  allowedEnv: NodeJS.ProcessEnv;
  /** The operating-system sandbox `launch` starts CLIs in (found when first read), `null`: unconfined. */
  readonly sandbox: SandboxKind | null;
  /** The app's asking, behind the user's rules: refused or allowed here without asking, confirmed here, or asked of the app. */
  gate(askApp: AskPermission): AskPermission;
}

/** Sorts a CLI's permission request into a kind the policy has a rule for. */
export function kindOfRequest(tool: string): RequestKind {
  switch (tool) {
    case "Read":
    case "Glob":
    case "Grep":
    case "LS":
    case "NotebookRead":
      return "read";
    case "Write":
    case "Edit":
    case "MultiEdit":
    case "NotebookEdit":
    case "file_change":
      return "write";
    case "Bash":
    case "BashOutput":
    case "KillShell":
    case "command_execution":
      return "command";
    case "WebFetch":
    case "WebSearch":
    case "network":
      return "network";
    default:
      return "other";
  }
}

/** Environment variables every agent CLI gets (from the worker's own environment, when set). */
export const BASE_ENV = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "TMPDIR"];

/** The environment an agent CLI starts with: the base set, the user's allowlist and provider keys, then what its runtime needs. */
export function allowedEnv(policy: Policy, from: NodeJS.ProcessEnv, own: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of [...BASE_ENV, ...policy.env, ...policy.providerKeys]) if (from[name] !== undefined) env[name] = from[name];
  return { ...env, ...own };
}

export function machinePolicy(policy: Policy = defaultPolicy(), from: NodeJS.ProcessEnv = process.env): MachinePolicy {
  return {
    policy,
    allowedEnv: allowedEnv(policy, from, {}),
    launch: (p) => launchAgent(p, policy, allowedEnv(policy, from, p.env)),
    get sandbox() {
      return sandboxOf();
    },
    gate: (askApp) => async (req) => {
      const decider = policy.decide[kindOfRequest(req.tool)];
      if (decider === "allow") return { allow: true };
      if (decider === "refuse") return { allow: false, message: "Refused by the policy of the user's machine." };
      if (decider === "machine") {
        const what = typeof req.input === "object" && req.input ? JSON.stringify(req.input).slice(0, 300) : String(req.input);
        const asked = confirmAtTerminal(`An app's agent asks to use ${req.tool}: ${what}${req.description ? ` (${req.description})` : ""}. Allow?`);
        if (asked === null) return { allow: false, message: "The user must confirm this on their machine, and no one is at its terminal." };
        return (await asked) ? { allow: true } : { allow: false, message: "The user refused this on their machine." };
      }
      return askApp(req);
    },
  };
}
