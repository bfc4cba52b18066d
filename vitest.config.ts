import path from "node:path";
import { defineConfig } from "vitest/config";
import { TOOLS_BIN } from "./scripts/test-tools.mjs";
import LongestFirst from "./test/helpers/longest-first.js";

// The agent CLIs the tests drive come from test/tools (installed by the global setup), not from the
// service's own install: their folder goes first on the PATH every test process inherits.
process.env.PATH = `${TOOLS_BIN}${path.delimiter}${process.env.PATH ?? ""}`;

// The workspace packages export their TypeScript sources under the `svc-source` condition
// (our own name: other packages publish raw sources under the common `source` one).
export default defineConfig({
  resolve: { conditions: ["svc-source"] },
  ssr: { resolve: { conditions: ["svc-source", "node", "default"] } },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/helpers/global-setup.ts"],
    // SVC_TEST_CPU_LOG=<file>: each test file appends the CPU its process and its reaped children spent (test/README.md).
    // openapi-check-setup.ts: a test during which a server answered what openapi.json does not declare fails.
    setupFiles: ["test/helpers/openapi-check-setup.ts", ...(process.env.SVC_TEST_CPU_LOG ? ["test/helpers/cpu-per-file.ts"] : [])],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // vitest's default is one worker fewer than the cores: one on these 2-core machines. Most suites
    // wait on real processes, sockets and timers rather than the CPU, so three share the cores well
    // (the whole suite: about 15 minutes on two cores, 14 in the last CI runs on a fresh clone).
    maxWorkers: 3,
    // The longest files first (their durations in test/durations.json): a fresh clone has no timings of its own.
    sequence: { sequencer: LongestFirst },
    reporters: ["default", "./test/helpers/totals-reporter.ts"],
  },
});
