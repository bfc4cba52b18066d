// Prisma CLI configuration. Prisma 6.19 with the JS schema engine runs offline
// (no engine binary download). The CLI is used only for `prisma generate` and for
// datamodel-to-SQL diffs when authoring migrations; it always calls `adapter()`,
// so it gets a throwaway in-memory PGlite. The server never uses this file.
import { defineConfig } from "prisma/config";
import { PGlite } from "@electric-sql/pglite";
import { PrismaPGlite } from "pglite-prisma-adapter";

export default defineConfig({
  experimental: { adapter: true },
  engine: "js",
  schema: "prisma/schema.prisma",
  async adapter() {
    return new PrismaPGlite(new PGlite());
  },
});
