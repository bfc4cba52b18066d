import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { onEachDatabase } from "../helpers/databases.js";
import { TestClock } from "../helpers/server.js";
import { openDatabase, type Database } from "../../server/db/open.js";
import { migrate } from "../../server/db/migrate.js";
import { RateLimiter, type Bucket } from "../../server/rate-limit/rate-limiter.js";
import { ApiError } from "../../server/errors.js";
import { addressKey } from "../../server/rate-limit/client-address.js";

describe("client address keys", () => {
  it("counts IPv4 as it is and IPv6 by its /64", () => {
    expect(addressKey("203.0.113.7")).toBe("203.0.113.7");
    expect(addressKey("::ffff:203.0.113.7")).toBe("203.0.113.7");
    expect(addressKey("2001:db8:0:1:aaaa:bbbb:cccc:dddd")).toBe("2001:db8:0:1::/64");
    expect(addressKey("2001:db8:0:1::1")).toBe("2001:db8:0:1::/64");
    expect(addressKey("2001:0db8:0000:0001::ffff")).toBe("2001:db8:0:1::/64");
    expect(addressKey("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(addressKey("::1")).toBe("0:0:0:0::/64");
    expect(addressKey("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
  });
});

/** The shared fixed-window counters behind pairing's limits, on each database. */
onEachDatabase("rate limiter on $db.name", (db) => {
  let database: Database;
  let drop: () => Promise<void>;
  const clock = new TestClock();
  let limiter: RateLimiter;

  beforeAll(async () => {
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

  describe("", () => {
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

    it("admit counts only what the decision says to, and a refused request counts in no bucket", async () => {
      const session = bucket("a:session", 2);
      const app = bucket("a:app", 100);
      const count = async (key: string) => (await database.prisma.rateLimitBucket.findUniqueOrThrow({ where: { key } })).count;
      expect(await limiter.admit([session, app], async () => ({ result: "right", count: false }))).toBe("right");
      expect(await count("a:session")).toBe(0);
      await limiter.admit([session, app], async () => ({ result: "wrong", count: true }));
      await limiter.admit([session, app], async () => ({ result: "wrong", count: true }));
      expect([await count("a:session"), await count("a:app")]).toEqual([2, 2]);
      // Full: refused before deciding, and the other bucket is not spent by the refusal.
      let decided = false;
      for (let i = 0; i < 5; i++) {
        const err = await refusal(limiter.admit([session, app], async () => ((decided = true), { result: null, count: true })));
        expect(err?.code).toBe("rate_limited");
      }
      expect(decided).toBe(false);
      expect(await count("a:app")).toBe(2);
    });

    it("concurrent takes count exactly: of 40 at once against a limit of 25, 25 pass", async () => {
      const b = bucket("conc:1", 25);
      const results = await Promise.all(Array.from({ length: 40 }, () => refusal(limiter.take([b]))));
      expect(results.filter((r) => r === null)).toHaveLength(25);
      const row = await database.prisma.rateLimitBucket.findUniqueOrThrow({ where: { key: "conc:1" } });
      expect(row.count).toBe(25);
    });

    it("concurrent wrong guesses never pass a full bucket, whatever the interleaving", async () => {
      const b = bucket("conc:guess", 10);
      const results = await Promise.all(Array.from({ length: 60 }, () => refusal(limiter.admit([b, bucket("conc:app", 1000)], async () => ({ result: "wrong", count: true })))));
      expect(results.filter((r) => r === null)).toHaveLength(10);
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
