import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { openDatabase, type DatabaseTarget } from "../../server/db/open.js";
import { migrate, readMigrations } from "../../server/db/migrate.js";

/**
 * Migrated template databases, made once per set of migrations (global setup) and copied
 * for each suite, so a suite's server starts on a database its migrator finds up to date
 * instead of migrating an empty one: on PGlite the copy saves the cluster's creation and
 * the migrations (about 8 s of CPU per server start on a busy two-core machine, against
 * about 1 s to copy and open), on Postgres the migrations (about 0.8 s against 0.15 s for
 * `CREATE DATABASE ... TEMPLATE`). The server's start path is the same: its migrator runs
 * and has nothing to do. What migrates an empty database is proven where that is the point
 * (test/ops/migrations.test.ts, the real process's first start in test/ops/process.test.ts,
 * the CLI and the dev app on a fresh Postgres).
 *
 * Templates are named by a hash of the migrations (names and checksums) and of the PGlite
 * version, so a changed or added migration makes a new one; old PGlite templates are removed
 * after a day. Several test runs (worktrees) may share the directory and the Postgres.
 */

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** tmpfs when there is one: a PGlite copy is about 40 MB of small files. */
export const TEMPLATE_DIR = fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();

export function templateHash(): string {
  const pglite = JSON.parse(fs.readFileSync(path.join(ROOT, "node_modules/@electric-sql/pglite/package.json"), "utf8")).version;
  const h = createHash("sha256").update(`pglite ${pglite}\n`);
  for (const m of readMigrations()) h.update(`${m.name} ${m.checksum}\n`);
  return h.digest("hex").slice(0, 16);
}

const DAY_MS = 24 * 3600 * 1000;

/** The migrated PGlite data folder for these migrations, made if missing; returns its path. */
export async function pgliteTemplate(hash: string): Promise<string> {
  const dir = path.join(TEMPLATE_DIR, `svc-test-pglite-${hash}`);
  // Leftovers: other migrations' templates and copies of a run that was killed, after a day.
  for (const name of fs.readdirSync(TEMPLATE_DIR)) {
    if (!/^svc-test-(pglite|db)-/.test(name) || name === path.basename(dir)) continue;
    const p = path.join(TEMPLATE_DIR, name);
    try {
      if (Date.now() - fs.statSync(p).mtimeMs > DAY_MS) fs.rmSync(p, { recursive: true, force: true });
    } catch {
      // another run removed it first
    }
  }
  if (fs.existsSync(path.join(dir, ".svc-template-ready"))) return dir;
  const building = `${dir}.building-${process.pid}`;
  fs.rmSync(building, { recursive: true, force: true });
  const db = await openDatabase({ kind: "pglite", dataDir: building });
  try {
    await migrate(db);
  } finally {
    await db.close();
  }
  fs.writeFileSync(path.join(building, ".svc-template-ready"), "");
  try {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(building, dir);
  } catch {
    // another run renamed its own first: the same migrations, so the same template
    fs.rmSync(building, { recursive: true, force: true });
  }
  return dir;
}

/** The migrated Postgres template database for these migrations, made if missing; returns its name. */
export async function postgresTemplate(adminUrl: string, hash: string): Promise<string> {
  const name = `svc_template_${hash}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const exists = await admin.query(`SELECT 1 FROM pg_database WHERE datname = $1`, [name]);
    if (exists.rowCount) return name;
    const building = `svc_template_build_${process.pid}_${Date.now()}`;
    await admin.query(`CREATE DATABASE ${building}`);
    const url = new URL(adminUrl);
    url.pathname = `/${building}`;
    const db = await openDatabase({ kind: "postgres", url: url.toString() });
    try {
      await migrate(db);
    } finally {
      await db.close();
    }
    // Nobody connects to a template: a connection would make copying it fail.
    await admin.query(`ALTER DATABASE ${building} ALLOW_CONNECTIONS false`);
    try {
      await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`);
    } catch (err) {
      // Another run made it first (same migrations, same template).
      await admin.query(`DROP DATABASE IF EXISTS ${building} WITH (FORCE)`);
      if (!(await admin.query(`SELECT 1 FROM pg_database WHERE datname = $1`, [name])).rowCount) throw err;
    }
    return name;
  } finally {
    await admin.end();
  }
}

const copies = new Set<string>();
process.on("exit", () => {
  for (const dir of copies) fs.rmSync(dir, { recursive: true, force: true });
});

/** The migrated PGlite template copied to `dir`, without the template's ready marker. */
export function copyPgliteTemplate(template: string, dir: string): void {
  fs.cpSync(template, dir, { recursive: true });
  fs.rmSync(path.join(dir, ".svc-template-ready"));
}

/** A fresh copy of the migrated PGlite template (removed by `drop`, or when the process exits). */
export function pgliteCopy(template: string): { target: DatabaseTarget; drop(): Promise<void> } {
  const dir = fs.mkdtempSync(path.join(TEMPLATE_DIR, "svc-test-db-"));
  copies.add(dir);
  copyPgliteTemplate(template, dir);
  return {
    target: { kind: "pglite", dataDir: dir },
    drop: async () => {
      fs.rmSync(dir, { recursive: true, force: true });
      copies.delete(dir);
    },
  };
}
