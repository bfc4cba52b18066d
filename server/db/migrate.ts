import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fromRoot } from "../paths.js";
import type { Database } from "./open.js";

export const MIGRATIONS_DIR = fromRoot("prisma", "migrations");

export interface Migration {
  name: string;
  sql: string;
  checksum: string;
}

/** The committed migrations, in order (folder names sort by their timestamp prefix). */
export function readMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && fs.existsSync(path.join(dir, d.name, "migration.sql")))
    .map((d) => d.name)
    .sort()
    .map((name) => {
      const sql = fs.readFileSync(path.join(dir, name, "migration.sql"), "utf8");
      return { name, sql, checksum: createHash("sha256").update(sql).digest("hex") };
    });
}

// Any fixed number: every instance takes the same advisory lock while migrating.
const MIGRATION_LOCK = 72_410_001;

/**
 * Applies the committed SQL migrations not applied yet, each in its own
 * transaction, recorded in `_svc_migrations`. Several instances starting at once
 * on one Postgres serialise on an advisory lock. A migration whose file changed
 * after it was applied stops the start: migrations are append-only.
 */
export async function migrate(db: Database, migrations = readMigrations()): Promise<string[]> {
  return db.exclusive(MIGRATION_LOCK, async (sql) => {
    await sql.exec(`CREATE TABLE IF NOT EXISTS "_svc_migrations" (
      "name" TEXT PRIMARY KEY,
      "checksum" TEXT NOT NULL,
      "applied_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP
    )`);
    const applied = new Map(
      (await sql.query<{ name: string; checksum: string }>(`SELECT name, checksum FROM "_svc_migrations"`)).map((r) => [r.name, r.checksum]),
    );
    const done: string[] = [];
    for (const m of migrations) {
      const known = applied.get(m.name);
      if (known !== undefined) {
        if (known !== m.checksum) {
          throw new Error(`Migration ${m.name} was changed after it was applied; add a new migration instead of editing an old one.`);
        }
        continue;
      }
      // One multi-statement exec is one implicit transaction on both databases;
      // the explicit BEGIN/COMMIT makes that plain.
      try {
        await sql.exec(`BEGIN;\n${m.sql}\n;\nINSERT INTO "_svc_migrations" (name, checksum) VALUES ('${m.name.replace(/'/g, "''")}', '${m.checksum}');\nCOMMIT;`);
      } catch (err) {
        await sql.exec("ROLLBACK").catch(() => {});
        throw new Error(`Migration ${m.name} failed: ${(err as Error).message}`);
      }
      done.push(m.name);
    }
    return done;
  });
}
