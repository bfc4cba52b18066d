import { spawnSync } from "node:child_process";

/**
 * The agent CLI versions this worker drives, and the ones it was tested with.
 * Outside a range a CLI is found but not served (advertised `supported: false`):
 * its event formats and flags may have changed under us. Tested: Claude Code
 * 2.1.197, Codex 0.169.0.
 */
export const SUPPORTED_VERSIONS = {
  "claude-code": { min: "2.1.0", below: "3.0.0", tested: "2.1.197" },
  codex: { min: "0.160.0", below: "1.0.0", tested: "0.169.0" },
} as const;

/** `<cli> --version`, parsed (`2.1.197 (Claude Code)`, `codex-cli 0.169.0`); null when it does not answer with one. */
export function versionOf(command: string): string | null {
  const r = spawnSync(command, ["--version"], { encoding: "utf8", timeout: 10_000 });
  return /(\d+\.\d+\.\d+)/.exec(`${r.stdout ?? ""} ${r.stderr ?? ""}`)?.[1] ?? null;
}

const parts = (v: string) => v.split(".").map((n) => Number(n));
function compare(a: string, b: string): number {
  const [x, y] = [parts(a), parts(b)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return 0;
}

/** Whether this worker drives `version` of the CLI; when not, why. */
export function supportOf(name: keyof typeof SUPPORTED_VERSIONS, version: string | null): { supported: true } | { supported: false; note: string } {
  const range = SUPPORTED_VERSIONS[name];
  if (version === null) return { supported: false, note: `${name} did not say its version (--version); this worker drives ${range.min} up to (not including) ${range.below}` };
  if (compare(version, range.min) < 0 || compare(version, range.below) >= 0) {
    return { supported: false, note: `${name} ${version} is not supported: this worker drives ${range.min} up to (not including) ${range.below} (tested with ${range.tested})` };
  }
  return { supported: true };
}
