// Writes test/durations.json: each test file's wall time (seconds) as the CI log of a full
// run reports it, for the sequencer that starts the longest files first
// (test/helpers/longest-first.ts). Refresh it after a suite grows or shrinks a lot:
//   node scripts/test-durations.mjs /tmp/svc-ci-test.log
import fs from "node:fs";

const log = process.argv[2];
if (!log) {
  process.stderr.write("usage: node scripts/test-durations.mjs <log of a full `npm test` run>\n");
  process.exit(2);
}
const durations = {};
// vitest's default reporter: " ✓ test/runs/runs.test.ts (42 tests) 31312ms" (❯ or × when some failed).
for (const line of fs.readFileSync(log, "utf8").replace(/\x1b\[[0-9;]*m/g, "").split("\n")) {
  const m = /^\s*[✓❯×]\s+(test\/\S+\.test\.ts)\s.*?(\d+)ms$/.exec(line);
  if (m) durations[m[1]] = Math.round(Number(m[2]) / 100) / 10;
}
const sorted = Object.fromEntries(Object.entries(durations).sort(([a], [b]) => a.localeCompare(b)));
fs.writeFileSync(new URL("../test/durations.json", import.meta.url), `${JSON.stringify(sorted, null, 2)}\n`);
process.stdout.write(`test/durations.json: ${Object.keys(sorted).length} files\n`);
