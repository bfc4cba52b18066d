import pg from "pg";
import { describe, inject } from "vitest";
import { randomId } from "../../server/crypto.js";
import type { DatabaseTarget } from "../../server/db/open.js";
import { pgliteCopy } from "./templates.js";

export interface TestDatabase {
  name: "pglite" | "postgres";
  /**
   * A fresh database for one suite, and how to drop it: empty, or with `migrated` a copy of
   * the migrated template (see templates.ts), for a suite whose server would only migrate it.
   */
  create(options?: { migrated?: boolean }): Promise<{ target: DatabaseTarget; drop(): Promise<void> }>;
}

const postgresUrl = inject("postgresUrl");
const postgresTemplate = inject("postgresTemplate");
export const pgliteTemplate = inject("pgliteTemplate");

const pglite: TestDatabase = {
  name: "pglite",
  create: async ({ migrated = false } = {}) => (migrated ? pgliteCopy(pgliteTemplate) : { target: { kind: "pglite", dataDir: null }, drop: async () => {} }),
};

const postgres: TestDatabase = {
  name: "postgres",
  create: async ({ migrated = false } = {}) => {
    const admin = postgresUrl!;
    const name = randomId("svc_test_", 12);
    await withClient(admin, (c) => c.query(`CREATE DATABASE ${name}${migrated ? ` TEMPLATE ${postgresTemplate}` : ""}`));
    const url = new URL(admin);
    url.pathname = `/${name}`;
    return {
      target: { kind: "postgres", url: url.toString() },
      drop: () => withClient(admin, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => {}),
    };
  },
};

/** One client on `url` for `fn`, closed after. */
export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** The databases every data-layer suite runs on: PGlite always, Postgres when reachable. */
export const DATABASES: { db: TestDatabase; skip: boolean }[] = [
  { db: pglite, skip: false },
  { db: postgres, skip: postgresUrl === null },
];

export const postgresAvailable = postgresUrl !== null;
export const postgresAdminUrl = postgresUrl;

/**
 * The suite `body` once per database, each in its own `describe` titled `title` with
 * `$db.name` replaced by the database's name (or " on <name>" appended). The skip rule is
 * applied here, once: without a reachable Postgres its `describe` is skipped, so vitest
 * still counts and reports its tests as skipped, and its hooks do not run. Tests inside
 * use plain `it`.
 */
export function onEachDatabase(title: string, body: (db: TestDatabase) => void): void {
  for (const { db, skip } of DATABASES) describe.skipIf(skip)(titled(title, db), () => body(db));
}

/** The suite `body` on Postgres only (several server instances sharing one database); skipped without one. */
export function onPostgres(title: string, body: (db: TestDatabase) => void): void {
  describe.skipIf(!postgresAvailable)(title, () => body(postgres));
}

/** The suite `body` on PGlite only (what does not depend on the database, run once). */
export function onPGlite(title: string, body: (db: TestDatabase) => void): void {
  describe(titled(title, pglite), () => body(pglite));
}

function titled(title: string, db: TestDatabase): string {
  return title.includes("$db.name") ? title.replace("$db.name", db.name) : `${title} on ${db.name}`;
}

