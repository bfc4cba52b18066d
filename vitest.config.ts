import { defineConfig } from "vitest/config";

// The workspace packages export their TypeScript sources under the `svc-source` condition
// (our own name: other packages publish raw sources under the common `source` one).
export default defineConfig({
  resolve: { conditions: ["svc-source"] },
  ssr: { resolve: { conditions: ["svc-source", "node", "default"] } },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/helpers/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    reporters: ["default", "./test/helpers/totals-reporter.ts"],
  },
});
