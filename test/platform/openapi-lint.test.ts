import { execFile } from "node:child_process";
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const cli = fileURLToPath(new URL("../../node_modules/@redocly/cli/bin/cli.js", import.meta.url));

interface LintReport {
  totals: { errors: number; warnings: number; ignored: number };
  problems: { ruleId: string; severity: string; message: string; location: { pointer?: string }[] }[];
}

/** Redocly CLI's `lint` on the committed openapi.json with redocly.yaml (the recommended rules), offline. */
async function lint(): Promise<LintReport> {
  const env = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_COLOR: "1" };
  const args = [cli, "lint", "openapi.json", "--config", "redocly.yaml", "--format", "json"];
  // It exits 1 when it finds an error; the report is on stdout either way.
  const out = await promisify(execFile)(process.execPath, args, { cwd: root, env, maxBuffer: 64 * 1024 * 1024 }).catch((err: { stdout?: string; stderr?: string }) => {
    if (!err.stdout) throw new Error(`redocly lint did not report: ${err.stderr}`);
    return { stdout: err.stdout };
  });
  return JSON.parse(out.stdout) as LintReport;
}

describe("openapi.json under Redocly's recommended rules", () => {
  it("has no error and no warning (redocly.yaml)", async () => {
    const report = await lint();
    const problems = report.problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location.map((l) => l.pointer).join(", ")}`);
    expect(problems).toEqual([]);
    expect(report.totals).toEqual({ errors: 0, warnings: 0, ignored: 0 });
  }, 60_000);

  it("lints with the recommended rules, only two turned off, each with its reason", () => {
    const config = fs.readFileSync(new URL("../../redocly.yaml", import.meta.url), "utf8");
    expect(config).toMatch(/^extends:\n\s+- recommended$/m);
    const off = [...config.matchAll(/^\s+([\w-]+): off$/gm)].map((m) => m[1]);
    expect(off.sort()).toEqual(["info-license", "operation-2xx-response"]);
    for (const rule of off) expect(config, `a comment before ${rule}`).toMatch(new RegExp(`#[^\\n]*\\n\\s+${rule}: off`));
  });
});
