import fs from "node:fs";
import type { Reporter, TestModule } from "vitest/node";

/** The ten files that took longest (their tests and hooks), so the suite's time budget stays in sight. */
function slowest(modules: ReadonlyArray<TestModule>): string {
  const times = modules.map((m) => ({ file: m.relativeModuleId, s: m.diagnostic().duration / 1000 })).sort((a, b) => b.s - a.s);
  if (times.length < 2) return "";
  return `\nThe ten slowest files:\n${times
    .slice(0, 10)
    .map((t) => `  ${t.s.toFixed(1).padStart(6)} s  ${t.file}`)
    .join("\n")}\n`;
}

/** What the files checked against openapi.json (test/helpers/openapi-check.ts), added up; a line for the run's end. */
function openApiChecked(): string {
  const log = process.env.SVC_OPENAPI_CHECK_LOG;
  if (!log || !fs.existsSync(log)) return "";
  const sum = { answers: 0, events: 0, requestBodies: 0 };
  for (const line of fs.readFileSync(log, "utf8").split("\n").filter(Boolean)) {
    const c = JSON.parse(line) as typeof sum;
    sum.answers += c.answers;
    sum.events += c.events;
    sum.requestBodies += c.requestBodies;
  }
  fs.rmSync(log, { force: true });
  return `\nChecked against openapi.json: ${sum.answers} answers (${sum.events} stream events), ${sum.requestBodies} request bodies; any mismatch failed its test.\n`;
}

/** Prints the totals as the last line, in the plain form CI reads: `N passed, N failed`. */
export default class TotalsReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>) {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const m of modules) {
      let failedHere = 0;
      for (const t of m.children.allTests()) {
        const state = t.result().state;
        if (state === "passed") passed++;
        else if (state === "failed") failedHere++;
        else skipped++;
      }
      // A file that failed outside any test (its import, a beforeAll: its tests are then
      // reported skipped) counts as one failure.
      if (m.state() === "failed" && failedHere === 0) failedHere = 1;
      failed += failedHere;
    }
    const notice = process.env.SVC_TEST_POSTGRES_SKIPPED ? `${process.env.SVC_TEST_POSTGRES_SKIPPED}\n` : "";
    process.stdout.write(openApiChecked());
    process.stdout.write(slowest(modules));
    process.stdout.write(`\n${notice}${skipped ? `(${skipped} skipped)\n` : ""}${passed} passed, ${failed} failed\n`);
  }
}
