import fs from "node:fs";
import path from "node:path";
import { MIGRATIONS_DIR } from "../server/db/migrate.js";

/**
 * Writes `sql` as a new migration, `prisma/migrations/<UTC timestamp>_<name>/migration.sql`
 * (the folder names sort by their timestamp: the order the server applies them in), and
 * says where. The one place both migration scripts (`migration:new`, `migration:function`)
 * name and write a migration.
 */
export function writeMigration(name: string, sql: string): void {
  const stamp = new Date().toISOString().replace(/\D/g, "").slice(0, 14);
  const dir = path.join(MIGRATIONS_DIR, `${stamp}_${name}`);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "migration.sql"), sql);
  process.stdout.write(`${path.relative(process.cwd(), dir)}/migration.sql written\n`);
}
