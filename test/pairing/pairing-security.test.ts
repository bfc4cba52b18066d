import { createHash, randomInt } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { USER_CODE_ALPHABET } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { bearer, expectError } from "../helpers/requests.js";
import { tableCounts } from "../helpers/snapshot.js";
import { parseConfig } from "../../server/config.js";
import { DEFAULT_CODE_LIMITS, DEFAULT_GUESS_LIMITS, pairingLimitsOf } from "../../server/pairing/limits.js";

/**
 * Pairing as an attacker sees it: codes and sessions of one app (or environment,
 * or user) are worth nothing in another, ownership comes only from the approving
 * session, sessions end on time, guessing and code minting hit their limits, and
 * no secret is kept in clear. Time moves by the test clock, never by sleeping.
 */

interface DeviceCode {
  device_code: string;
  user_code: string;
  interval: number;
  expires_in: number;
  app_name: string;
}
interface PairingToken {
  pairing_token: string;
  machine_id: string;
  environment: string;
}
interface MachineList {
  data: { id: string; hostname: string }[];
}

const MACHINE = { hostname: "laptop", platform: "linux", arch: "x64", client: "svc-worker" };
const json = { "content-type": "application/json" };
const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

/** A well-formed user code nobody was given (a clash with a real one is a 1-in-2.6e10 chance). */
function wrongCode(): string {
  let s = "";
  for (let i = 0; i < 8; i++) s += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return `${s.slice(0, 4)}-${s.slice(4)}`;
}

/** The body of a 200, with the text in the failure message when it is not. */
async function ok<T>(res: Response): Promise<T> {
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as T;
}

/** A 429 `rate_limited` whose Retry-After is whole seconds within `max`; returns it. */
async function rateLimited(res: Response, max: number): Promise<number> {
  await expectError(res, 429, "rate_limited");
  const header = res.headers.get("retry-after") ?? "";
  expect(header).toMatch(/^\d+$/);
  const seconds = Number(header);
  expect(seconds).toBeGreaterThanOrEqual(1);
  expect(seconds).toBeLessThanOrEqual(max);
  return seconds;
}

/** Runs `tasks` with at most `width` in flight: enough overlap to be quick, not a stampede. */
async function inParallel<T>(tasks: (() => Promise<T>)[], width = 8): Promise<T[]> {
  const out: T[] = new Array(tasks.length);
  let next = 0;
  const lane = async () => {
    while (next < tasks.length) {
      const i = next++;
      out[i] = await tasks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, tasks.length) }, lane));
  return out;
}

/**
 * The calls of a worker, an app backend and a browser against one server. Every
 * worker and browser call names its client address (X-Forwarded-For, honoured only
 * under TRUST_PROXY), so each test keeps its own per-address buckets.
 */
function clientsOf(server: TestServer) {
  const from = (address: string) => ({ "x-forwarded-for": address });
  const requestCode = (pk: string, address: string, machine: Partial<typeof MACHINE> = {}) =>
    server.fetch(`/c/${pk}/v1/device/code`, { method: "POST", headers: { ...json, ...from(address) }, body: JSON.stringify({ ...MACHINE, ...machine }) });
  return {
    requestCode,
    newCode: async (pk: string, address: string, machine: Partial<typeof MACHINE> = {}) => ok<DeviceCode>(await requestCode(pk, address, machine)),
    /** The token poll: through a connect key's path, or the bare `/v1/device/token` when `pk` is null. */
    poll: (deviceCode: string, pk: string | null) =>
      server.fetch(pk ? `/c/${pk}/v1/device/token` : "/v1/device/token", { method: "POST", headers: json, body: JSON.stringify({ device_code: deviceCode }) }),
    mintSession: async (appKey: string, user: string) =>
      (await ok<{ session: string }>(await server.fetch("/v1/end_users/session", { method: "POST", headers: { ...json, ...bearer(appKey) }, body: JSON.stringify({ user }) })))
        .session,
    endSessions: async (appKey: string, user: string) =>
      ok<{ user: string; ended: number }>(await server.fetch(`/v1/end_users/session?user=${encodeURIComponent(user)}`, { method: "DELETE", headers: bearer(appKey) })),
    /** What the connect page calls, as one user's browser at one address. */
    browser: (session: string, address: string) => {
      const headers = { ...bearer(session), ...from(address) };
      const post = (path: string, code: string) => server.fetch(path, { method: "POST", headers: { ...headers, ...json }, body: JSON.stringify({ user_code: code }) });
      return {
        lookup: (code: string) => server.fetch(`/v1/device/lookup?code=${encodeURIComponent(code)}`, { headers }),
        approve: (code: string) => post("/v1/device/approve", code),
        deny: (code: string) => post("/v1/device/deny", code),
        machines: () => server.fetch("/v1/machines", { headers }),
        connect: () => server.fetch("/v1/connect", { headers }),
      };
    },
  };
}

/** The suite's limits (settings), lowered from the defaults: 10 guesses per session is the default already. */
const SUITE_LIMITS = {
  PAIRING_GUESSES_PER_ADDRESS: "60",
  PAIRING_GUESSES_PER_APP: "150",
  PAIRING_CODES_PER_ADDRESS: "150",
  PAIRING_CODES_PER_CONNECT_KEY: "60",
};

it("the pairing limits' defaults: 10 wrong codes per session, 300 per client address and 1,000 per app in 10 minutes; 1,000 device codes per address an hour and 3,000 per connect key a minute", () => {
  expect(parseConfig({}).pairingLimits).toEqual({
    guessesPerSession: 10,
    guessesPerAddress: 300,
    guessesPerApp: 1000,
    codesPerAddressPerHour: 1000,
    codesPerConnectKeyPerMinute: 3000,
  });
  expect(pairingLimitsOf(parseConfig({}).pairingLimits)).toEqual({ codes: DEFAULT_CODE_LIMITS, guesses: DEFAULT_GUESS_LIMITS });
  expect(DEFAULT_GUESS_LIMITS).toEqual({
    perSession: { max: 10, windowSeconds: 600 },
    perAddress: { max: 300, windowSeconds: 600 },
    perApp: { max: 1000, windowSeconds: 600 },
  });
  expect(DEFAULT_CODE_LIMITS).toEqual({ perAddress: { max: 1000, windowSeconds: 3600 }, perConnectKey: { max: 3000, windowSeconds: 60 } });
  // Each is a setting, read as given.
  expect(parseConfig(SUITE_LIMITS).pairingLimits).toEqual({ guessesPerSession: 10, guessesPerAddress: 60, guessesPerApp: 150, codesPerAddressPerHour: 150, codesPerConnectKeyPerMinute: 60 });
});

onEachDatabase("pairing security on $db.name", (db) => {
  let server: TestServer;
  let drop: () => Promise<void>;
  let c: ReturnType<typeof clientsOf>;

  beforeAll(async () => {
    const made = await db.create({ migrated: true });
    drop = made.drop;
    // Behind a "proxy" on loopback, so each request can say which client address it is from.
    // The limits lowered from their defaults (the file's first test checks those), so reaching each takes
    // tens of requests, not thousands: the rules are the same whatever the numbers.
    server = await startTestServer(made.target, { TRUST_PROXY: "loopback", ...SUITE_LIMITS });
    c = clientsOf(server);
  });
  afterAll(async () => {
    await server?.close();
    await drop?.();
  });

  /** A client address no other test has used: per-address buckets are shared across apps. */
  let addresses = 0;
  const freshAddress = () => {
    const n = addresses++;
    return `198.18.${Math.floor(n / 250)}.${(n % 250) + 1}`;
  };
  const newApp = (name: string) => server.services.keys.createApp(name, "test");
  /** Every table's row count except the rate-limit counters, which wrong guesses bump by design. */
  const countsBesidesLimits = async () => {
    const { rate_limit_buckets: _, ...rest } = await tableCounts(server.db);
    return rest;
  };
  const deviceRows = (appId: string) => server.db.query(`SELECT * FROM device_authorizations WHERE app_id = $1 ORDER BY id`, [appId]);

  describe("apps and environments are sealed from each other", () => {
    it("another app's or environment's session cannot see, approve or deny a code; another connect key cannot redeem it", async () => {
      const appA = await newApp("App A");
      const appB = await newApp("App B");
      const liveA = await server.services.keys.createKeys(appA.appId, "live");
      const ip = freshAddress();
      const code = await c.newCode(appA.connectKey, ip);
      const outsiders = {
        "app B": c.browser(await c.mintSession(appB.appKey, "alice"), ip),
        "app A live": c.browser(await c.mintSession(liveA.appKey, "alice"), ip),
      };
      const madeUp = await expectError(await outsiders["app B"].lookup(wrongCode()), 404, "not_found");
      const counts = await countsBesidesLimits();
      const rowBefore = await deviceRows(appA.appId);

      for (const [who, browser] of Object.entries(outsiders)) {
        // Exactly what a made-up code gets: nothing says the code exists elsewhere.
        for (const res of [await browser.lookup(code.user_code), await browser.approve(code.user_code), await browser.deny(code.user_code)]) {
          const { error } = await expectError(res, 404, "not_found");
          expect(error.message, who).toBe(madeUp.error.message);
        }
      }
      await expectError(await c.poll(code.device_code, appB.connectKey), 400, "invalid_grant");
      await expectError(await c.poll(code.device_code, liveA.connectKey), 400, "invalid_grant");

      expect(await countsBesidesLimits()).toEqual(counts);
      expect(await deviceRows(appA.appId)).toEqual(rowBefore);
      expect(rowBefore).toMatchObject([{ status: "pending", end_user_id: null, last_polled_at: null }]);

      // Still A's to answer, and A's worker still gets its one token.
      const own = c.browser(await c.mintSession(appA.appKey, "alice"), ip);
      expect(await ok(await own.lookup(code.user_code))).toMatchObject({ user_code: code.user_code, hostname: "laptop" });
      expect(await ok(await own.approve(code.user_code))).toEqual({ user_code: code.user_code, status: "approved" });
      const token = await ok<PairingToken>(await c.poll(code.device_code, appA.connectKey));
      expect(token).toMatchObject({ environment: "test", pairing_token: expect.stringMatching(/^pt_svc_/) });
      await expectError(await c.poll(code.device_code, appA.connectKey), 400, "invalid_grant");
    });
  });

  describe("users of one app are sealed from each other", () => {
    it("the approving session's user owns the machine, whatever the machine calls itself", async () => {
      const appA = await newApp("Owners A");
      const appB = await newApp("Owners B");
      const ip = freshAddress();
      const alice = c.browser(await c.mintSession(appA.appKey, "alice"), ip);
      const bob = c.browser(await c.mintSession(appA.appKey, "bob"), ip);
      const otherApp = c.browser(await c.mintSession(appB.appKey, "bob"), ip);

      const code = await c.newCode(appA.connectKey, ip, { hostname: "alice-laptop", client: "alice" });
      await ok(await bob.approve(code.user_code));
      const { machine_id } = await ok<PairingToken>(await c.poll(code.device_code, appA.connectKey));

      const [owner] = await server.db.query<{ external_id: string }>(
        `SELECT e.external_id FROM machines m JOIN end_users e ON e.id = m.end_user_id WHERE m.id = $1`,
        [machine_id],
      );
      expect(owner.external_id).toBe("bob");
      expect((await ok<MachineList>(await bob.machines())).data).toEqual([expect.objectContaining({ id: machine_id, hostname: "alice-laptop" })]);
      expect((await ok<MachineList>(await alice.machines())).data).toEqual([]);
      // Same user id in another app is another person.
      expect((await ok<MachineList>(await otherApp.machines())).data).toEqual([]);
    });

    it("ending a user's sessions ends all of theirs in the calling app only", async () => {
      const appA = await newApp("Sessions A");
      const appB = await newApp("Sessions B");
      const ip = freshAddress();
      const aliceA1 = c.browser(await c.mintSession(appA.appKey, "alice"), ip);
      const aliceA2 = c.browser(await c.mintSession(appA.appKey, "alice"), ip);
      const bobA = c.browser(await c.mintSession(appA.appKey, "bob"), ip);
      const aliceB = c.browser(await c.mintSession(appB.appKey, "alice"), ip);

      expect(await c.endSessions(appB.appKey, "alice")).toEqual({ user: "alice", ended: 1 });
      await expectError(await aliceB.machines(), 401, "session_expired");
      await ok(await aliceA1.machines());
      await ok(await aliceA2.machines());

      expect(await c.endSessions(appA.appKey, "alice")).toEqual({ user: "alice", ended: 2 });
      await expectError(await aliceA1.machines(), 401, "session_expired");
      await expectError(await aliceA2.machines(), 401, "session_expired");
      await ok(await bobA.machines());
    });
  });

  describe("session lifetime", () => {
    it("a session works on every browser endpoint until 599 s and on none from 600 s", async () => {
      const app = await newApp("Lifetime");
      const ip = freshAddress();
      const toApprove = await c.newCode(app.connectKey, ip);
      const toDeny = await c.newCode(app.connectKey, ip);
      const untouched = await c.newCode(app.connectKey, ip);
      const browser = c.browser(await c.mintSession(app.appKey, "u1"), ip);

      server.clock.advance(599);
      await ok(await browser.connect());
      await ok(await browser.machines());
      await ok(await browser.lookup(toApprove.user_code));
      await ok(await browser.approve(toApprove.user_code));
      await ok(await browser.deny(toDeny.user_code));

      server.clock.advance(1);
      // A still-pending code (it lives 900 s) changes nothing: the session decides first.
      for (const res of [
        await browser.connect(),
        await browser.machines(),
        await browser.lookup(untouched.user_code),
        await browser.approve(untouched.user_code),
        await browser.deny(untouched.user_code),
      ]) {
        await expectError(res, 401, "session_expired");
      }
      expect((await deviceRows(app.appId)).map((r) => r.status).sort()).toEqual(["approved", "denied", "pending"]);
    });
  });

  describe("guessing user codes", () => {
    it("a session gets 10 wrong codes, then nothing (not even the right code) until the window ends", async () => {
      const app = await newApp("Guess per session");
      const ip = freshAddress();
      const code = await c.newCode(app.connectKey, ip);
      const guesser = c.browser(await c.mintSession(app.appKey, "u1"), ip);
      for (let i = 0; i < 10; i++) await expectError(await guesser.lookup(wrongCode()), 404, "not_found");

      expect(await rateLimited(await guesser.lookup(code.user_code), 600)).toBe(600);
      await rateLimited(await guesser.approve(code.user_code), 600);
      await rateLimited(await guesser.deny(code.user_code), 600);
      // The window is fixed and on the server's clock: Retry-After counts down with it.
      server.clock.advance(250);
      expect(await rateLimited(await guesser.lookup(code.user_code), 600)).toBe(350);
      expect((await deviceRows(app.appId))[0].status).toBe("pending");

      // The limit is the session's: the same person in a new session (same address, 10 of its 30 used) still can.
      await ok(await c.browser(await c.mintSession(app.appKey, "u1"), ip).lookup(code.user_code));

      // Sessions last as long as the window, so after it a new one is needed anyway.
      server.clock.advance(351);
      await expectError(await guesser.lookup(code.user_code), 401, "session_expired");
      const fresh = c.browser(await c.mintSession(app.appKey, "u1"), ip);
      expect(await ok(await fresh.approve(code.user_code))).toEqual({ user_code: code.user_code, status: "approved" });
    });

    it("an address gets PAIRING_GUESSES_PER_ADDRESS wrong codes (60 here) whatever the sessions (a large NAT's worth of typos), then nothing until the window ends; other addresses are unaffected", async () => {
      const app = await newApp("Guess per address");
      const code = await c.newCode(app.connectKey, freshAddress());
      const guessing = freshAddress();
      // Fresh sessions every 9 guesses, so only the address can be what stops them.
      const statuses = await inParallel(
        Array.from({ length: Math.ceil(60 / 9) }, (_, i) => async () => {
          const browser = c.browser(await c.mintSession(app.appKey, `guesser-${i}`), guessing);
          const seen: number[] = [];
          for (let k = i * 9; k < Math.min(i * 9 + 9, 60); k++) {
            const res = await browser.lookup(wrongCode());
            seen.push(res.status);
            await res.arrayBuffer();
          }
          return seen;
        }),
        4,
      );
      expect(statuses.flat()).toEqual(new Array(60).fill(404));
      const fromThere = c.browser(await c.mintSession(app.appKey, "new"), guessing);
      await rateLimited(await fromThere.lookup(code.user_code), 600);
      await rateLimited(await fromThere.approve(code.user_code), 600);

      const elsewhere = c.browser(await c.mintSession(app.appKey, "new"), freshAddress());
      await ok(await elsewhere.lookup(code.user_code));

      server.clock.advance(601);
      const later = c.browser(await c.mintSession(app.appKey, "new"), guessing);
      await ok(await later.approve(code.user_code));
    });

    it("an app and environment gets PAIRING_GUESSES_PER_APP wrong codes (150 here) across all addresses, then nothing; other apps and environments are unaffected", async () => {
      const app = await newApp("Guess per app");
      const liveKeys = await server.services.keys.createKeys(app.appId, "live");
      const other = await newApp("Bystander");
      const code = await c.newCode(app.connectKey, freshAddress());
      const liveCode = await c.newCode(liveKeys.connectKey, freshAddress());
      const otherCode = await c.newCode(other.connectKey, freshAddress());

      // 150 wrong codes as a distributed search would send them: 9 per session and address,
      // below both of those limits. At most 149 are counted when any is checked, so none is refused.
      const guessesPerBrowser = Array.from({ length: Math.ceil(150 / 9) }, (_, i) => Math.min(9, 150 - i * 9));
      const statuses = await inParallel(
        guessesPerBrowser.map((n, i) => async () => {
          const browser = c.browser(await c.mintSession(app.appKey, `searcher-${i}`), freshAddress());
          const seen: number[] = [];
          for (let k = 0; k < n; k++) {
            const res = await browser.lookup(wrongCode());
            seen.push(res.status);
            await res.arrayBuffer();
          }
          return seen;
        }),
      );
      expect(statuses.flat()).toEqual(new Array(150).fill(404));

      const anyone = c.browser(await c.mintSession(app.appKey, "innocent"), freshAddress());
      await rateLimited(await anyone.lookup(code.user_code), 600);
      await rateLimited(await anyone.approve(code.user_code), 600);
      await rateLimited(await anyone.deny(code.user_code), 600);

      await ok(await c.browser(await c.mintSession(liveKeys.appKey, "innocent"), freshAddress()).approve(liveCode.user_code));
      await ok(await c.browser(await c.mintSession(other.appKey, "innocent"), freshAddress()).approve(otherCode.user_code));
    });

    it("codes that cannot be user codes are 400 invalid_request and count against nothing", async () => {
      const app = await newApp("Malformed");
      const ip = freshAddress();
      const code = await c.newCode(app.connectKey, ip);
      const browser = c.browser(await c.mintSession(app.appKey, "u1"), ip);
      const limitsBefore = await server.db.query(`SELECT key, count FROM rate_limit_buckets ORDER BY key`);

      // Wrong length, vowels, digits: 15 of them, more than the session's 10.
      const malformed = ["hello", "BCDF-GHJ", "BCDF-GHJKL", "AEIO-UAEI", "BCDF-GHJ1", "        ", "-"];
      for (let i = 0; i < 15; i++) {
        const typed = malformed[i % malformed.length];
        const param = i % 3 === 0 ? "code" : "user_code";
        const res = i % 3 === 0 ? await browser.lookup(typed) : i % 3 === 1 ? await browser.approve(typed) : await browser.deny(typed);
        expect((await expectError(res, 400, "invalid_request")).error.param).toBe(param);
      }

      expect(await server.db.query(`SELECT key, count FROM rate_limit_buckets ORDER BY key`)).toEqual(limitsBefore);
      // Case and dashes do not matter for a real code, and all 10 wrong guesses are still there to make.
      await ok(await browser.lookup(code.user_code.toLowerCase().replace("-", "")));
      for (let i = 0; i < 10; i++) await expectError(await browser.lookup(wrongCode()), 404, "not_found");
      await rateLimited(await browser.lookup(code.user_code), 600);
    });
  });

  describe("minting device codes", () => {
    /** A whole pairing from one address, as a worker and a browser behind one NAT do it: the code, the user's approval, the token. */
    async function pairFrom(app: { appKey: string; connectKey: string }, address: string, user: string): Promise<PairingToken> {
      const code = await c.newCode(app.connectKey, address);
      await ok(await c.browser(await c.mintSession(app.appKey, user), address).approve(code.user_code));
      return ok<PairingToken>(await c.poll(code.device_code, app.connectKey));
    }

    it("whole pairings from one address succeed; the address gets PAIRING_CODES_PER_ADDRESS device codes an hour (150 here), whatever the app, then nothing until the hour ends, without using up a key's budget", async () => {
      // The suite's key limit is 60 a minute (PAIRING_CODES_PER_CONNECT_KEY), so one address reaches its 150 through three apps.
      const apps = [await newApp("NAT pairings"), await newApp("NAT codes 2"), await newApp("NAT codes 3")];
      const nat = freshAddress();
      const paired = await inParallel(Array.from({ length: 50 }, (_, i) => () => pairFrom(apps[0], nat, `pupil-${i}`)));
      expect(new Set(paired.map((p) => p.machine_id)).size).toBe(50);
      expect(await server.db.query(`SELECT id FROM machines WHERE app_id = $1`, [apps[0].appId])).toHaveLength(50);

      // 100 more codes from the same address through the other two apps: 150 in all.
      await inParallel(Array.from({ length: 100 }, (_, i) => () => c.newCode(apps[1 + (i % 2)].connectKey, nat)));
      await rateLimited(await c.requestCode(apps[2].connectKey, nat), 3600);
      expect(await deviceRows(apps[1].appId)).toHaveLength(50);

      // Refused for its own address, it keeps asking with the first app's key (10 of its 60 left this minute): 11 times.
      const refused = await inParallel(
        Array.from({ length: 11 }, () => async () => {
          const res = await c.requestCode(apps[0].connectKey, nat);
          await res.arrayBuffer();
          return res.status;
        }),
      );
      expect(refused).toEqual(new Array(11).fill(429));
      await rateLimited(await c.requestCode(apps[0].connectKey, nat), 3600);
      expect(await deviceRows(apps[0].appId)).toHaveLength(50);
      // An address over its own limit cannot use up the key's budget for everyone else: another address still pairs.
      await c.newCode(apps[0].connectKey, freshAddress());
      server.clock.advance(3600);
      await c.newCode(apps[0].connectKey, nat);
    });

    it("a connect key gets PAIRING_CODES_PER_CONNECT_KEY device codes a minute across all addresses (60 here); other apps' keys are unaffected", async () => {
      const app = await newApp("Codes per key");
      const other = await newApp("Codes bystander");
      await inParallel(
        Array.from({ length: 6 }, () => async () => {
          const ip = freshAddress();
          for (let i = 0; i < 10; i++) await c.newCode(app.connectKey, ip);
        }),
      );
      expect(await deviceRows(app.appId)).toHaveLength(60);

      await rateLimited(await c.requestCode(app.connectKey, freshAddress()), 60);
      expect(await deviceRows(app.appId)).toHaveLength(60);
      await c.newCode(other.connectKey, freshAddress());

      server.clock.advance(60);
      await c.newCode(app.connectKey, freshAddress());
    });

  });

  describe("secrets at rest", () => {
    it("no table and no log line holds a device code, user code, session or pairing token in clear", async () => {
      const app = await newApp("Secrets");
      const ip = freshAddress();
      const code = await c.newCode(app.connectKey, ip);
      const session = await c.mintSession(app.appKey, "u1");
      const browser = c.browser(session, ip);
      await ok(await browser.lookup(code.user_code));
      await ok(await browser.approve(code.user_code));
      const { pairing_token, machine_id } = await ok<PairingToken>(await c.poll(code.device_code, app.connectKey));

      const bareUserCode = code.user_code.replace("-", "");
      const secrets = [code.device_code, code.user_code, bareUserCode, session, pairing_token];

      const [device] = await deviceRows(app.appId);
      const [machine] = await server.db.query(`SELECT * FROM machines WHERE id = $1`, [machine_id]);
      // The rows are the right ones: they hold the hashes.
      expect(device).toMatchObject({ device_code_hash: sha256(code.device_code), user_code_hash: sha256(bareUserCode), machine_id });
      expect(machine).toMatchObject({ token_hash: sha256(pairing_token) });

      const tables = await server.db.query<{ tablename: string }>(`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`);
      for (const { tablename } of tables) {
        const dump = JSON.stringify(await server.db.query(`SELECT * FROM "${tablename}"`));
        for (const secret of secrets) expect(dump.includes(secret), `${tablename} holds ${secret}`).toBe(false);
      }
      const logs = server.logs.join("");
      // The access log did see these requests (so its silence below means something).
      expect(logs).toContain("/v1/device/approve");
      for (const secret of secrets) expect(logs.includes(secret), `a log line holds ${secret}`).toBe(false);
    });
  });

  describe("without TRUST_PROXY", () => {
    it("X-Forwarded-For is ignored: spoofing it escapes neither per-address limit", async () => {
      // Its own server and database: every request here is from the one loopback address.
      const made = await db.create({ migrated: true });
      const direct = await startTestServer(made.target, { PAIRING_CODES_PER_ADDRESS: "20", PAIRING_GUESSES_PER_ADDRESS: "60" });
      try {
        const d = clientsOf(direct);
        const app = await direct.services.keys.createApp("No proxy", "test");
        let spoofed = 0;
        const spoof = () => `203.0.113.${++spoofed}`;

        const code = await d.newCode(app.connectKey, spoof());
        for (let n = 0; n < 60; n += 9) {
          const browser = d.browser(await d.mintSession(app.appKey, `guesser-${n}`), spoof());
          for (let i = n; i < Math.min(n + 9, 60); i++) await expectError(await browser.lookup(wrongCode()), 404, "not_found");
        }
        await rateLimited(await d.browser(await d.mintSession(app.appKey, "new"), spoof()).lookup(code.user_code), 600);

        for (let i = 1; i < 20; i++) await d.newCode(app.connectKey, spoof());
        await rateLimited(await d.requestCode(app.connectKey, spoof()), 3600);
        expect(await direct.db.query(`SELECT id FROM device_authorizations`)).toHaveLength(20);
      } finally {
        await direct.close();
        await made.drop();
      }
    });
  });
});
