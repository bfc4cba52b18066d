// Prisma CLI configuration. Prisma 6.19 with the JS schema engine runs offline
// (no engine binary download). The CLI is used only for `prisma generate` and for
// datamodel-to-SQL diffs when authoring migrations; it always calls `adapter()`,
// so it gets a throwaway in-memory PGlite. The server never uses this file.
import { defineConfig } from "prisma/config";
import { PGlite } from "@electric-sql/pglite";
import { PrismaPGlite } from "pglite-prisma-adapter";
import type { SqlMigrationAwareDriverAdapterFactory } from "@prisma/driver-adapter-utils";

export default defineConfig({
  experimental: { adapter: true },
  engine: "js",
  schema: "prisma/schema.prisma",
  async adapter() {
    // pglite-prisma-adapter pins an older @prisma/driver-adapter-utils: same
    // runtime shape, distinct type identity.
    return new PrismaPGlite(new PGlite()) as unknown as SqlMigrationAwareDriverAdapterFactory;
  },
});
