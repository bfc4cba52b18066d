import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASES } from "./helpers/databases.js";
import { TestClock } from "./helpers/server.js";
import { openDatabase, type Database } from "../server/db/open.js";
import { migrate } from "../server/db/migrate.js";
import { RateLimiter, type Bucket } from "../server/rate-limit/rate-limiter.js";
import { ApiError } from "../server/errors.js";

/** The shared fixed-window counters behind pairing's limits, on each database. */
describe.each(DATABASES)("rate limiter on $db.name", ({ db, skip }) => {
  let database: Database;
  let drop: () => Promise<void>;
  const clock = new TestClock();
  let limiter: RateLimiter;

  beforeAll(async () => {
    if (skip) return;
    const made = await db.create();
    drop = made.drop;
    database = await openDatabase(made.target);
    await migrate(database);
    limiter = new RateLimiter(database.prisma, clock);
  });
  afterAll(async () => {
    await database?.close();
    await drop?.();
  });

  const bucket = (key: string, max = 5, windowSeconds = 60): Bucket => ({ key, limit: { max, windowSeconds }, what: "tries" });
  const refusal = (p: Promise<unknown>) => p.then(() => null, (e: unknown) => e as ApiError);

  describe.skipIf(skip)("", () => {
    it("take: the hit past the limit is 429 with Retry-After to the end of the window; the next window starts afresh", async () => {
      const b = bucket("t:1");
      for (let i = 0; i < 5; i++) await limiter.take([b]);
      clock.advance(20);
      const err = await refusal(limiter.take([b]));
      expect(err).toBeInstanceOf(ApiError);
      expect(err!.code).toBe("rate_limited");
      expect(err!.extra.headers).toEqual({ "Retry-After": "40" });
      clock.advance(40);
      await limiter.take([b]);
    });

    it("check counts nothing and refuses only a full bucket; hit counts", async () => {
      const b = bucket("c:1", 2);
      await limiter.check([b]);
      await limiter.check([b]);
      await limiter.hit([b]);
      await limiter.check([b]);
      await limiter.hit([b]);
      expect((await refusal(limiter.check([b])))?.code).toBe("rate_limited");
      // Another bucket is its own.
      await limiter.check([bucket("c:2", 2)]);
    });

    it("concurrent takes count exactly: of 40 at once against a limit of 25, 25 pass", async () => {
      const b = bucket("conc:1", 25);
      const results = await Promise.all(Array.from({ length: 40 }, () => refusal(limiter.take([b]))));
      expect(results.filter((r) => r === null)).toHaveLength(25);
      const row = await database.prisma.rateLimitBucket.findUniqueOrThrow({ where: { key: "conc:1" } });
      expect(row.count).toBe(40);
    });

    it("prune forgets counters a day old, and only those", async () => {
      await limiter.take([bucket("old:1")]);
      clock.advance(24 * 60 * 60 + 1);
      await limiter.take([bucket("new:1")]);
      await limiter.prune();
      const keys = (await database.prisma.rateLimitBucket.findMany()).map((r) => r.key);
      expect(keys).not.toContain("old:1");
      expect(keys).toContain("new:1");
    });
  });
});
