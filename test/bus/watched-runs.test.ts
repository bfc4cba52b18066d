import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { onPostgres } from "../helpers/databases.js";
import { openDatabase, type Database, type Sql } from "../../server/db/open.js";
import { WatchedRuns } from "../../server/bus/watched-runs.js";
import { randomId } from "../../server/crypto.js";
import { pino } from "pino";

/**
 * Postgres alone: a reader of a run driven on another instance marks the run
 * (`runs.watched_elsewhere`) so that its steps are announced. A mark that meets the
 * database away lets the readers read at once (what is stored), and is tried again
 * each second until it is made; then the readers read again. The database is away
 * for real here: the marks go to a port where nothing listens, then to the database.
 */
onPostgres("a run's mark for its readers elsewhere, through the database away", (database) => {
  let db: Database;
  let drop: () => Promise<void>;
  /** Where the marks go: nowhere (a closed port, ECONNREFUSED) until `back`. */
  let away = true;
  const nowhere = new pg.Pool({ connectionString: "postgres://postgres@127.0.0.1:1/none", connectionTimeoutMillis: 1000 });
  nowhere.on("error", () => {});
  const sql: Sql = {
    exec: (text) => (away ? nowhere.query(text).then(() => {}) : db.exec(text)),
    query: (text, params, options) => (away ? nowhere.query(text, params).then((r) => r.rows) : db.query(text, params, options)),
  };

  beforeAll(async () => {
    const made = await database.create({ migrated: true });
    drop = made.drop;
    db = await openDatabase(made.target);
    await db.query(`INSERT INTO apps (id, name) VALUES ('app_watch', 'watch')`);
    await db.query(`INSERT INTO end_users (id, app_id, environment, external_id) VALUES ('eu_watch', 'app_watch', 'test', 'w')`);
  });
  afterAll(async () => {
    await nowhere.end();
    await db?.close();
    await drop?.();
  });

  async function run(): Promise<string> {
    const id = randomId("run_", 24);
    await db.query(`INSERT INTO runs (id, app_id, environment, end_user_id, source, model, request, status) VALUES ($1, 'app_watch', 'test', 'eu_watch', 'runs', 'm', '{}', 'running')`, [id]);
    return id;
  }
  const marked = async (id: string) => (await db.query<{ w: boolean }>(`SELECT watched_elsewhere AS w FROM runs WHERE id = $1`, [id]))[0].w;
  const until = async (what: () => Promise<boolean>, ms: number) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (await what()) return true;
      await new Promise((r) => setTimeout(r, 50));
    }
    return false;
  };

  it("away: the readers read at once and the mark is tried again each second; back: the run is marked and the readers read again. A reader gone meanwhile stops the tries (its run stays unmarked)", { timeout: 20_000 }, async () => {
    const watched = new WatchedRuns(sql, pino({ level: "silent" }));
    const kept = await run();
    const left = await run();
    let readyKept = 0;
    let readyLeft = 0;
    away = true;
    watched.watch(kept, null, () => readyKept++);
    watched.watch(left, null, () => readyLeft++);
    // The database away: each reader reads what is stored at once, unmarked.
    expect(await until(async () => readyKept === 1 && readyLeft === 1, 5_000)).toBe(true);
    expect(await marked(kept)).toBe(false);
    // The second run's last reader leaves while the database is away: no more tries for it.
    watched.unwatch(left);
    // Still away past a retry: tried again, still not marked, and its readers told again each time they may read.
    await new Promise((r) => setTimeout(r, 1_300));
    expect(readyKept).toBeGreaterThanOrEqual(2);
    expect(await marked(kept)).toBe(false);
    away = false;
    // Back: the next try marks the run, and its readers read once more (the steps stored meanwhile).
    expect(await until(() => marked(kept), 3_000)).toBe(true);
    const after = readyKept;
    await new Promise((r) => setTimeout(r, 1_300));
    // Marked: no more tries, no more reads.
    expect(readyKept).toBe(after);
    // The run whose reader left was never tried again (the control above, on the same database, was marked).
    expect(await marked(left)).toBe(false);
    expect(readyLeft).toBe(1);
  });
});
