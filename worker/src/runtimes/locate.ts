import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { isExecutableFile, shebangOf, which } from "../policy/launchable.js";

/** The agent CLIs the worker drives, by their runtime's name. */
export type AgentName = "claude-code" | "codex";

/** The version managers whose shims pick the real CLI at run time. */
export type ShimManager = "mise" | "asdf" | "volta";

export type Located =
  | { ok: true; command: string; found: string; via?: ShimManager }
  | { ok: false; code: "cli_not_found"; message: string }
  | { ok: false; code: "cli_not_launchable"; message: string; found: string };

/**
 * A version manager's shim, and the manager's own program: mise's shims are links
 * to `mise`, volta's to `volta-shim` (beside `volta`), asdf's (and mise's in
 * file mode) are scripts that `exec asdf exec <name>` (`mise x -- <name>`).
 */
export function shimOf(file: string): { manager: ShimManager; program: string } | null {
  let real: string;
  try {
    real = fs.realpathSync(file);
  } catch {
    return null;
  }
  const base = path.basename(real);
  if (base === "mise" && path.basename(file) !== "mise") return { manager: "mise", program: real };
  if (base === "volta-shim") {
    const beside = path.join(path.dirname(real), "volta");
    return { manager: "volta", program: fs.existsSync(beside) ? beside : "volta" };
  }
  if (!shebangOf(real)) return null;
  let text = "";
  try {
    if (fs.statSync(real).size > 16_384) return null;
    text = fs.readFileSync(real, "utf8");
  } catch {
    return null;
  }
  const asdf = /(?:^|\s)(\S*asdf)\s+exec\b/m.exec(text);
  if (asdf) return { manager: "asdf", program: asdf[1] };
  const mise = /(?:^|\s)(\S*mise)\s+(?:x|exec)\b/m.exec(text);
  if (mise) return { manager: "mise", program: mise[1] };
  const volta = /(?:^|\s)(\S*volta)\s+run\b/m.exec(text);
  if (volta) return { manager: "volta", program: volta[1] };
  return null;
}

/** The policy line that names a CLI's real path, for a layout the worker cannot resolve itself. */
export const commandFix = (name: AgentName) => `svc-worker policy set commands.${name} /full/path/to/${name === "claude-code" ? "claude" : "codex"}`;

/**
 * Finds an agent CLI the way the user's shell would: the policy's explicit path
 * (`commands.<name>`), else config.json's `runtimes.claude`/`runtimes.codex`,
 * else its name on PATH. A version manager's shim is resolved through the
 * manager (`mise which`, `asdf which`, `volta which`, asked in the working
 * folder, where a project may pin another version); one the manager cannot
 * resolve is refused with the policy line that fixes it. Links are left as they
 * are here: the launcher resolves them (`launchable.ts`).
 */
export function locateCli(name: AgentName, o: { explicit?: string; configured?: string; env: NodeJS.ProcessEnv; cwd?: string }): Located {
  const program = name === "claude-code" ? "claude" : "codex";
  const wanted = o.explicit ?? o.configured ?? program;
  const executable = (p: string) => (isExecutableFile(p) ? p : undefined);
  const found = wanted.includes("/") ? executable(path.resolve(wanted)) : which(wanted, o.env.PATH);
  if (!found) {
    if (o.explicit) return { ok: false, code: "cli_not_launchable", found: o.explicit, message: `the policy names ${o.explicit} (commands.${name}), which is not an executable file` };
    return { ok: false, code: "cli_not_found", message: `not found on PATH` };
  }
  const shim = shimOf(found);
  if (!shim) return { ok: true, command: found, found };
  const asked = spawnSync(shim.program, ["which", program], { cwd: o.cwd, env: o.env, encoding: "utf8", timeout: 15_000 });
  const said = (asked.stdout ?? "").trim().split("\n")[0]?.trim() ?? "";
  const real = said && path.isAbsolute(said) ? executable(said) : undefined;
  if (asked.status === 0 && real && !shimOf(real)) return { ok: true, command: real, found, via: shim.manager };
  const why = asked.error ? asked.error.message : `${(asked.stderr || asked.stdout || `exit ${asked.status}`).trim().split("\n").at(-1)}`;
  return {
    ok: false,
    code: "cli_not_launchable",
    found,
    message: `${found} is a shim of ${shim.manager}, and \`${shim.manager} which ${program}\` did not say which ${program} it runs (${why}); name the real one: ${commandFix(name)}`,
  };
}
