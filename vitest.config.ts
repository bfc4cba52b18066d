import { defineConfig } from "vitest/config";

// The workspace packages export their TypeScript sources under the `source` condition.
export default defineConfig({
  resolve: { conditions: ["source"] },
  ssr: { resolve: { conditions: ["source", "node", "default"] } },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/helpers/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    reporters: ["default", "./test/helpers/totals-reporter.ts"],
  },
});
