import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { openDatabase, type Database } from "../../server/db/open.js";
import { migrate, readMigrations } from "../../server/db/migrate.js";
import { functionNames, functionSource } from "../../server/db/functions.js";
import { LIVE_SUBSCRIPTION_STATUSES } from "../../server/ledger/functions.js";

/**
 * Every SQL function has one source, prisma/functions/<name>.sql, and the
 * migrated database runs exactly that: the live definition is compared with
 * the one the file creates (in a scratch schema, in a transaction rolled back).
 */

const SCRATCH = "svc_function_source";

/** The live functions of `public` (and the trigger function), by name. */
async function liveFunctions(db: Database): Promise<Map<string, string>> {
  const rows = await db.query<{ name: string; def: string }>(
    `SELECT p.proname AS name, pg_get_functiondef(p.oid) AS def
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = 'public' AND (p.proname LIKE 'svc\\_%' OR p.prorettype = 'trigger'::regtype)`,
  );
  return new Map(rows.map((r) => [r.name, r.def]));
}

/** The definition `source` creates, as Postgres prints it (its schema named `public`), with nothing left behind. */
async function definitionOf(db: Database, name: string, source: string): Promise<string> {
  return db.exclusive(72_410_002, async (sql) => {
    await sql.exec(`BEGIN; CREATE SCHEMA ${SCRATCH}; SET LOCAL search_path TO ${SCRATCH}, public;\n${source}`);
    try {
      const [row] = await sql.query<{ def: string }>(
        `SELECT pg_get_functiondef(p.oid) AS def FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2`,
        [SCRATCH, name],
      );
      return row?.def.replace(`FUNCTION ${SCRATCH}.`, "FUNCTION public.") ?? "";
    } finally {
      await sql.exec("ROLLBACK");
    }
  });
}

/** The text a migration defines a function with, `OR REPLACE` or not. */
const normalized = (sql: string) => sql.replace(/CREATE OR REPLACE FUNCTION/g, "CREATE FUNCTION").trim();

describe("SQL functions: one source each", () => {
  it("the latest migration defining each function holds its source file's text", () => {
    const migrations = readMigrations();
    for (const name of functionNames()) {
      const defining = migrations.filter((m) => new RegExp(`CREATE (OR REPLACE )?FUNCTION "${name}"\\(`).test(m.sql));
      expect(defining.length, name).toBeGreaterThan(0);
      expect(normalized(defining[defining.length - 1].sql), `${name}: latest defined in ${defining[defining.length - 1].name}`).toContain(normalized(functionSource(name)));
    }
  });

  onEachDatabase("on $db.name", (db) => {
    let database: Database;
    let drop: () => Promise<void> = async () => {};
    let live: Map<string, string>;

    beforeAll(async () => {
      const created = await db.create();
      drop = created.drop;
      database = await openDatabase(created.target);
      await migrate(database);
      live = await liveFunctions(database);
    });
    afterAll(async () => {
      await database?.close();
      await drop();
    });

    it("every live function has a source file, and every source file a live function", () => {
      expect([...live.keys()].sort()).toEqual(functionNames());
    });

    it("no function is defined twice (a changed parameter list makes another function: the old one is dropped first)", async () => {
      const rows = await database.query<{ name: string; n: number }>(
        `SELECT p.proname AS name, count(*)::int AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'public' AND p.proname LIKE 'svc\\_%' GROUP BY p.proname`,
      );
      // The control: the functions counted are the ones with source files.
      expect(rows.map((r) => r.name).sort()).toEqual(functionNames().filter((name) => name.startsWith("svc_")));
      expect(rows.filter((r) => r.n > 1)).toEqual([]);
    });

    it("each live definition is the one its source file creates", async () => {
      for (const name of functionNames()) {
        expect(live.get(name), name).toBeDefined();
        expect(await definitionOf(database, name, functionSource(name)), name).toBe(live.get(name));
      }
    });

    it("a body differing from the live one is caught (the comparison can fail)", async () => {
      const source = functionSource("svc_start_run");
      const changed = source.replace("'allowance_exhausted'", "'allowance_exceeded'");
      expect(changed).not.toBe(source);
      expect(await definitionOf(database, "svc_start_run", changed)).not.toBe(live.get("svc_start_run"));
      // A change of whitespace alone is a change too: the body is stored as written.
      expect(await definitionOf(database, "svc_user_plan", functionSource("svc_user_plan").replace("SELECT COALESCE", "SELECT  COALESCE"))).not.toBe(live.get("svc_user_plan"));
    });

    it("the live subscription statuses are the same in SQL (svc_subscription_live) and TypeScript (LIVE_SUBSCRIPTION_STATUSES)", async () => {
      // Every status Stripe gives a subscription, and the app's own `canceled`.
      const statuses = ["active", "trialing", "past_due", "unpaid", "canceled", "incomplete", "incomplete_expired", "paused"];
      const rows = await database.query<{ status: string; live: boolean }>(`SELECT s AS status, svc_subscription_live(s) AS live FROM unnest($1::text[]) s`, [statuses]);
      expect(rows.filter((r) => r.live).map((r) => r.status)).toEqual(statuses.filter((s) => LIVE_SUBSCRIPTION_STATUSES.includes(s)));
    });

    it("a run holds one of its runtime's slots when queued or running, or waiting on an agent CLI (svc_holds_slot, which routing and svc_start_run both count by)", async () => {
      const rows = await database.query<{ status: string; kind: string; holds: boolean }>(
        `SELECT s::text AS status, k::text AS kind, svc_holds_slot(s, k) AS holds FROM unnest(enum_range(NULL::"RunStatus")) s, unnest(enum_range(NULL::"RuntimeKind")) k ORDER BY 1, 2`,
      );
      const holding = rows.filter((r) => r.holds).map((r) => `${r.status} ${r.kind}`);
      expect(holding).toEqual(["queued agent", "queued model", "running agent", "running model", "waiting agent"]);
      // The rest of the table is there, none holding: every status and kind was asked.
      expect(rows.length).toBeGreaterThan(holding.length + 4);
    });

    it("the scratch schema is gone after a comparison", async () => {
      expect(await database.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [SCRATCH])).toEqual([]);
    });
  });
});
