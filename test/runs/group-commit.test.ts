import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GroupCommit } from "../../server/db/group-commit.js";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";

describe("group commit", () => {
  it("gathers what arrives in one turn of the event loop into one write; a lone write still goes", async () => {
    const batches: number[][] = [];
    const gc = new GroupCommit<number>(async (items) => void batches.push(items));
    await Promise.all([1, 2, 3, 4, 5].map((n) => gc.add(n)));
    await gc.add(6);
    expect(batches).toEqual([[1, 2, 3, 4, 5], [6]]);
  });

  it("a failed batch is written again item by item: only the bad item's caller fails; writes arriving meanwhile go next", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const written: number[][] = [];
    const gc = new GroupCommit<number>(async (items) => {
      if (items.includes(1)) await gate;
      if (items.includes(2)) throw new Error("constraint violated");
      written.push(items);
    });
    const first = [gc.add(1), gc.add(2), gc.add(5)].map((p) => p.then(() => "ok", (e: Error) => e.message));
    await new Promise((r) => setImmediate(r));
    const later = [gc.add(3), gc.add(4)];
    release();
    expect(await Promise.all(first)).toEqual(["ok", "constraint violated", "ok"]);
    await Promise.all(later);
    expect(written).toEqual([[1], [5], [3, 4]]);
  });

  it("respects the largest batch", async () => {
    const sizes: number[] = [];
    const gc = new GroupCommit<number>(async (items) => void sizes.push(items.length), 4);
    await Promise.all(Array.from({ length: 10 }, (_, i) => gc.add(i)));
    expect(sizes).toEqual([4, 4, 2]);
  });
});

/** `svc/echo` answers under concurrency: one run and one ledger row per answer, never more or fewer, however they were grouped. */
onEachDatabase("svc/echo records by group commit on $db.name", (db) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServerOn(db);
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  it("200 concurrent answers: 200 runs and 200 rows, each answer's run id among them", async () => {
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        server.fetch("/v1/chat/completions", {
          method: "POST",
          headers: { authorization: `Bearer ${server.dev.appKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "svc/echo", user: `gc-${i % 7}`, messages: [{ role: "user", content: `hello ${i}` }] }),
        }),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(200).fill(200));
    const ids = answers.map((a) => a.headers.get("service-run-id"));
    const rows = await server.db.query<{ run_id: string; kind: string }>(`SELECT run_id, kind FROM usage_rows WHERE kind = 'echo'`);
    expect(rows).toHaveLength(200);
    expect(new Set(rows.map((r) => r.run_id))).toEqual(new Set(ids));
    const runs = await server.db.query<{ n: string | number }>(`SELECT count(*) AS n FROM runs WHERE model = 'svc/echo'`);
    expect(Number(runs[0].n)).toBe(200);
  });
});
