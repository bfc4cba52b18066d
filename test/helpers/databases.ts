import pg from "pg";
import { inject } from "vitest";
import { randomId } from "../../server/crypto.js";
import type { DatabaseTarget } from "../../server/db/open.js";

export interface TestDatabase {
  name: "pglite" | "postgres";
  /** A fresh, empty database for one suite, and how to drop it. */
  create(): Promise<{ target: DatabaseTarget; drop(): Promise<void> }>;
}

const postgresUrl = inject("postgresUrl");

const pglite: TestDatabase = {
  name: "pglite",
  create: async () => ({ target: { kind: "pglite", dataDir: null }, drop: async () => {} }),
};

const postgres: TestDatabase = {
  name: "postgres",
  create: async () => {
    const admin = postgresUrl!;
    const name = randomId("svc_test_", 12);
    await withClient(admin, (c) => c.query(`CREATE DATABASE ${name}`));
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
