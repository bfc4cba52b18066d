import http from "node:http";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { contract, ErrorEnvelope, type RouteMetadata } from "@svc/contract";
import { onEachDatabase } from "../helpers/databases.js";
import { startTestServerOn, type TestServer } from "../helpers/server.js";
import { ROUTE_CASES } from "../helpers/requests.js";
import { signInOwner } from "../helpers/owner.js";
import { removeTempDirs, startServerProcess, stopAll, tempDir } from "../helpers/process.js";
import { migratedTempDir } from "../helpers/migrated-folder.js";

/**
 * A malformed-input battery generated from the contract: for every route, with
 * the credential it takes (so its input checks are reached), every class of bad
 * input: wrong types, missing and extra fields, huge strings and numbers, unicode
 * and NUL, duplicate keys, deep nesting, bad query values, path tricks, wrong
 * content types; then raw-socket requests Node's HTTP parser refuses. From a fixed
 * seed, `SVC_FUZZ_RUNS` random combinations on top of the fixed classes (default
 * 400; raise it for a longer run, `SVC_FUZZ_SEED` for another seed).
 *
 * It asserts: no answer is 5xx (except a route's documented 501/503), every
 * non-2xx body is the error envelope, nothing hangs, the server still answers at
 * the end, and its log holds no unhandled error.
 */

const RUNS = Number(process.env.SVC_FUZZ_RUNS ?? 400);
const SEED = Number(process.env.SVC_FUZZ_SEED ?? 20261124);
const CONCURRENCY = 8;
const REQUEST_TIMEOUT_MS = 20_000;

/** mulberry32: a small seeded PRNG, so a failure is replayed by its seed. */
function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n: number) => Math.floor(next() * n), pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)] };
}

interface Route {
  name: string;
  method: string;
  /** Contract path, e.g. `/v1/runs/:id/cancel`. */
  path: string;
  auth: RouteMetadata["auth"];
  params: Record<string, string>;
  query: Record<string, string>;
  queryKeys: string[];
  body: unknown;
  bodyKeys: string[];
  /** 5xx answers this route documents for reasons other than bad input (Stripe not configured, not built). */
  allowed5xx: Set<string>;
}

interface Case {
  route: Route;
  cls: string;
  method: string;
  /** Raw path and query, sent byte for byte. */
  target: string;
  headers: Record<string, string>;
  body?: Buffer | string;
}

/** The keys of a zod object schema, through optional/default/effects wrappers. */
function shapeKeys(schema: unknown): string[] {
  let s = schema as z.ZodTypeAny | undefined;
  for (let i = 0; i < 6 && s; i++) {
    if (s instanceof z.ZodObject) return Object.keys(s.shape);
    const def = (s as { _def?: { innerType?: z.ZodTypeAny; schema?: z.ZodTypeAny } })._def;
    s = def?.innerType ?? def?.schema;
  }
  return [];
}

function routesFromContract(): Route[] {
  return Object.entries(contract).map(([name, r]) => {
    const rc = ROUTE_CASES.find((c) => c.name === name)!;
    const route = r as { method: string; path: string; metadata: RouteMetadata; pathParams?: unknown; query?: unknown; body?: unknown; responses: Record<string, unknown> };
    // The valid fixture's parameter values, read back from its filled path.
    const params: Record<string, string> = {};
    const names = route.path.split("/");
    const filled = rc.path.split("?")[0].split("/");
    names.forEach((seg, i) => {
      if (seg.startsWith(":")) params[seg.slice(1)] = filled[i];
    });
    const query = Object.fromEntries(new URLSearchParams(rc.path.split("?")[1] ?? ""));
    const allowed5xx = new Set<string>();
    if (route.metadata.notBuiltYet) allowed5xx.add("501:not_implemented");
    // Routes whose own contract lists 503 (Stripe not configured here, say) may answer it for a valid request.
    if (503 in route.responses) allowed5xx.add("503:service_unavailable");
    // ...and 501 `not_configured` (a feature its operator has not set up: Stripe, here).
    if (501 in route.responses) allowed5xx.add("501:not_configured");
    return {
      name,
      method: route.method,
      path: route.path,
      auth: route.metadata.auth,
      params,
      query,
      queryKeys: shapeKeys(route.query),
      body: rc.body,
      bodyKeys: [...new Set([...Object.keys((rc.body as object) ?? {}), ...shapeKeys(route.body)])],
      allowed5xx,
    };
  });
}

// ---- the classes of bad input ----

const HUGE = "x".repeat(100_000);
const UNICODE = ["\u0000", "a\u0000b", "\ud800", "x\udfffy", "😀".repeat(500), "\u202eevil", "e\u0301\u0301\u0301", "\uffff\ufffe", "\u2028\u2029", "ｆｕｌｌ", "\u0085"];
const WRONG_TYPES: unknown[] = [0, -1, 1.5, true, false, null, [], {}, [[["x"]]], { $ne: 1 }, "", "__proto__", "constructor"];
/** Number literals JSON.stringify cannot make: spliced into the text. */
const RAW_NUMBERS = ["1e999", "-1e999", "-0", "123456789012345678901234567890", "9007199254740993", "1E-400", "0.0000000000000000000000001", "1e308", "-9007199254740993"];
const PATH_TRICKS = ["%", "%zz", "%00", "a%00b", "..", ".", "%2e%2e", "%2F", "a%2Fb", "x".repeat(5000), "x".repeat(300), "%C3%28", "%ED%A0%80", "%F0%9F%98%80", "%20", ";", "*", "%25", "%E0%A4%A", "%%", "%u0041", "%FF"];
const QUERY_TRICKS = ["%00", "%", "%zz", "a%00b", "%ED%A0%80", "%C0%AF", "", "x".repeat(5000), "-1", "1e999", "NaN", "0x10", "Infinity", "%2B", "+", "%FF", "2026-13", "true", "null", "[]"];
const CONTENT_TYPES = [
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/json; charset=utf-16",
  "application/json; charset=latin1",
  "application/json, text/plain",
  "application/vnd.api+json",
  "",
  "application/xml",
  "application/jsonx",
];

function deep(depth: number, inner: string): string {
  return "[".repeat(depth) + inner + "]".repeat(depth);
}

/** The dashboard's credential: the cookie and the CSRF token (sent on every method: a GET ignores it). */
interface OwnerCredential {
  cookie: string;
  csrf: string;
}
type Creds = { appKey: string; session: string; pk: string; owner: OwnerCredential; disposableOwner: OwnerCredential };
/** Owner routes that end sessions: they get an owner of their own, so the others keep theirs (and reach their input checks). */
const ENDS_SESSIONS = new Set(["ownerSignOut", "ownerSignOutEverywhere", "ownerSetPassword"]);

function buildCases(routes: Route[], creds: Creds, runs: number, seed: number): Case[] {
  const rnd = prng(seed);
  const cases: Case[] = [];
  const ownerHeaders = (o: OwnerCredential) => ({ cookie: o.cookie, "x-csrf-token": o.csrf });
  const auth = (r: Route): Record<string, string> =>
    r.auth === "appKey"
      ? { authorization: `Bearer ${creds.appKey}` }
      : r.auth === "session"
        ? { authorization: `Bearer ${creds.session}` }
        : r.auth === "owner"
          ? ownerHeaders(ENDS_SESSIONS.has(r.name) ? creds.disposableOwner : creds.owner)
          : {};
  const pathOf = (r: Route, params: Record<string, string> = {}) =>
    r.path
      .split("/")
      .map((seg) => (seg.startsWith(":") ? (params[seg.slice(1)] ?? (seg === ":pk" ? creds.pk : encodeURIComponent(r.params[seg.slice(1)]))) : seg))
      .join("/");
  const queryOf = (q: Record<string, string>, raw = "") => {
    const s = Object.entries(q)
      .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
      .join("&");
    const all = [s, raw].filter(Boolean).join("&");
    return all ? `?${all}` : "";
  };
  const json = { "content-type": "application/json" };
  const add = (r: Route, cls: string, over: Partial<Omit<Case, "route" | "cls">> = {}) => {
    const body = "body" in over ? over.body : r.body === undefined ? undefined : JSON.stringify(r.body);
    cases.push({
      route: r,
      cls,
      method: over.method ?? r.method,
      target: over.target ?? pathOf(r) + queryOf(r.query),
      headers: { ...auth(r), ...(body !== undefined ? json : {}), ...over.headers },
      body,
    });
  };
  const withField = (r: Route, key: string, value: unknown) => JSON.stringify({ ...((r.body as object) ?? {}), [key]: value });
  const withRawField = (r: Route, key: string, raw: string) => {
    const marker = "\u0001MARK\u0001";
    return JSON.stringify({ ...((r.body as object) ?? {}), [key]: marker }).replace(JSON.stringify(marker), raw);
  };
  const bodyKey = (r: Route) => (r.bodyKeys.length ? rnd.pick(r.bodyKeys) : "user");
  const queryKey = (r: Route) => (r.queryKeys.length ? rnd.pick(r.queryKeys) : "user");
  /** `n` of `xs`, chosen by the seed (every value still comes up across the routes). */
  const some = <T>(xs: readonly T[], n: number): T[] => [...xs].sort(() => rnd.next() - 0.5).slice(0, n);
  const paramNames = (r: Route) => Object.keys(r.params).concat(r.path.includes(":pk") ? ["pk"] : []);

  // Each class once per route (and each of its values where there are few).
  for (const r of routes) {
    add(r, "valid");
    const keys = r.bodyKeys.length ? r.bodyKeys : ["user"];
    // The fixture's own fields first (they are the ones checked before anything else), at most eight.
    for (const key of keys.slice(0, 8)) {
      add(r, "wrong type", { body: withField(r, key, rnd.pick(WRONG_TYPES)) });
      add(r, "huge string", { body: withField(r, key, HUGE) });
      add(r, "huge number", { body: withRawField(r, key, rnd.pick(RAW_NUMBERS)) });
    }
    for (const key of keys.slice(0, 4)) {
      const without = { ...((r.body as Record<string, unknown>) ?? {}) };
      delete without[key];
      add(r, "missing field", { body: JSON.stringify(without) });
    }
    add(r, "extra field", { body: withField(r, "unexpected_field", { nested: [1, 2, 3] }) });
    add(r, "extra field", { body: withField(r, "__proto__", { polluted: true }) });
    add(r, "extra field", { body: JSON.stringify({ ...((r.body as object) ?? {}), constructor: { prototype: { polluted: true } } }) });
    for (const u of some(UNICODE, 6)) add(r, "unicode and NUL", { body: withField(r, bodyKey(r), u) });
    add(r, "unicode and NUL", { body: JSON.stringify(r.body ?? {}).replace(/"([^"]*)"/, '"$1\\u0000"') });
    add(r, "unicode and NUL", { body: JSON.stringify(r.body ?? {}).replace(/"([^"]*)"/, '"$1\\ud83d"') });
    add(r, "unicode and NUL", { body: Buffer.concat([Buffer.from('{"user":"'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('"}')]) });
    add(r, "unicode and NUL", { body: `\ufeff${JSON.stringify(r.body ?? {})}` });
    const text = JSON.stringify(r.body ?? {});
    add(r, "duplicate keys", { body: text.length > 2 ? `{"${keys[0]}":1,${text.slice(1)}` : `{"user":"a","user":"b"}` });
    add(r, "duplicate keys", { body: text.length > 2 ? `${text.slice(0, -1)},"${keys[0]}":{"a":[1]}}` : `{"a":1,"a":2}` });
    for (const depth of [65, 1000, 8000, 20_000]) add(r, "deep nesting", { body: withRawField(r, bodyKey(r), deep(depth, '"\\u0041\\u0000"')) });
    add(r, "deep nesting", { body: deep(50_000, "1") });
    add(r, "deep nesting", { body: '{"a":'.repeat(5000) + "1" + "}".repeat(5000) });
    for (const whole of ["null", "[]", '"str"', "123", "{}", "", "{", '{"a":1}}', "true", "[1,2", '{"a":"\\x"}', '{"a":"\\u12"}', `[${"0,".repeat(100_000)}0]`]) {
      add(r, "wrong body", { body: whole, headers: json });
    }
    for (const ct of CONTENT_TYPES) add(r, "content type", { body: text, headers: { "content-type": ct } });
    add(r, "content type", { body: text, headers: { "content-type": "application/json", "content-encoding": "gzip" } });
    add(r, "content type", { body: text, headers: { "content-type": "application/json", "content-encoding": "br" } });
    for (const v of some(QUERY_TRICKS, 10)) {
      const k = queryKey(r);
      add(r, "bad query", { target: pathOf(r) + queryOf({ ...r.query, [k]: "PLACEHOLDER" }).replace("PLACEHOLDER", v) });
    }
    for (const raw of some(["user=a&user=b", "user[]=a", "user[a]=b", "user[a][b][c][d][e][f][g]=1", "&&&=&=", "=x", "limit=1&limit=2", `${"a".repeat(300)}=1`], 4)) {
      add(r, "bad query", { target: pathOf(r) + queryOf(r.query, raw) });
    }
    for (const name of paramNames(r)) for (const trick of some(PATH_TRICKS, 12)) add(r, "path trick", { target: pathOf(r, { [name]: trick }) + queryOf(r.query) });
    for (const t of [`/${pathOf(r)}`, pathOf(r).replace(/\//g, "//"), `${pathOf(r)}/`, pathOf(r).toUpperCase(), `${pathOf(r)}/..`, `${pathOf(r)}%2F..%2F..`, `${pathOf(r)}?%`, `${pathOf(r)}#frag`]) {
      add(r, "path trick", { target: t });
    }
    add(r, "method", { method: r.method === "GET" ? "POST" : "GET" });
    add(r, "method", { method: "OPTIONS", headers: { origin: "https://evil.example", "access-control-request-method": r.method } });
    add(r, "headers", { headers: { authorization: `Bearer ${"A".repeat(8000)}` } });
    add(r, "headers", { headers: { "content-length": "0" }, body: undefined });
  }

  // Random combinations of the above, from the seed.
  const mutate = (r: Route): Case => {
    let body: unknown = structuredClone(r.body ?? {});
    const steps = 1 + rnd.int(3);
    let target = pathOf(r) + queryOf(r.query);
    const headers: Record<string, string> = { ...auth(r), ...json };
    let raw: string | null = null;
    for (let i = 0; i < steps; i++) {
      const which = rnd.int(6);
      if (which === 0 && body && typeof body === "object") (body as Record<string, unknown>)[bodyKey(r)] = rnd.pick(WRONG_TYPES);
      else if (which === 1 && body && typeof body === "object") (body as Record<string, unknown>)[bodyKey(r)] = rnd.pick(UNICODE) + "y".repeat(rnd.int(3) * 1000);
      else if (which === 2) raw = JSON.stringify(body).replace(/\d+|"[^"]*"/, rnd.pick(RAW_NUMBERS));
      else if (which === 3) target = pathOf(r) + queryOf({ ...r.query, [queryKey(r)]: "P" }).replace("=P", `=${rnd.pick(QUERY_TRICKS)}`);
      else if (which === 4 && paramNames(r).length) target = pathOf(r, { [rnd.pick(paramNames(r))]: rnd.pick(PATH_TRICKS) }) + queryOf(r.query);
      else if (which === 5) headers["content-type"] = rnd.pick(CONTENT_TYPES);
      else if (body && typeof body === "object") delete (body as Record<string, unknown>)[bodyKey(r)];
    }
    return { route: r, cls: "random", method: r.method, target, headers, body: raw ?? JSON.stringify(body) };
  };
  for (let i = 0; i < runs; i++) cases.push(mutate(rnd.pick(routes)));
  return cases;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/**
 * One request exactly as built (node:http sends the path's bytes as given), with a deadline, on a connection of
 * its own: an answer given before the body was read may close the connection, which a reused one would misreport.
 */
function send(base: URL, c: Case): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: base.hostname, port: base.port, method: c.method, path: c.target, headers: c.headers, agent: false, timeout: REQUEST_TIMEOUT_MS },
      (res) => {
        // A stream that began (a valid request of an event stream) is not read to its end.
        if ((res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
          res.destroy();
          return resolve({ status: res.statusCode ?? 0, headers: res.headers, text: "" });
        }
        const chunks: Buffer[] = [];
        res.on("data", (d: Buffer) => chunks.push(d));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
    req.on("error", reject);
    req.end(c.body);
  });
}

/** Why this answer breaks the rules, or null. */
function problemWith(c: Case, a: Answer): string | null {
  let envelope: z.infer<typeof ErrorEnvelope> | null = null;
  if (a.status >= 300) {
    if (!String(a.headers["content-type"] ?? "").startsWith("application/json")) return `non-2xx ${a.status} outside the envelope (content-type ${a.headers["content-type"]})`;
    try {
      const parsed = ErrorEnvelope.safeParse(JSON.parse(a.text));
      if (!parsed.success) return `non-2xx ${a.status} body is not the envelope: ${a.text.slice(0, 200)}`;
      envelope = parsed.data;
    } catch {
      return `non-2xx ${a.status} body is not JSON: ${a.text.slice(0, 200)}`;
    }
    if (envelope.error.requestId !== a.headers["request-id"]) return "the envelope's requestId differs from the Request-Id header";
    if (/\bat .+\.(ts|js):\d+/.test(a.text)) return "a stack trace in the answer";
  }
  if (a.status >= 500 && !c.route.allowed5xx.has(`${a.status}:${envelope?.error.code}`)) return `answered ${a.status} ${envelope?.error.code}`;
  return null;
}

/** Raw bytes on a fresh connection: what Node's HTTP parser refuses. Resolves with what came back before the close. */
function rawExchange(port: number, bytes: string | Buffer, timeoutMs = REQUEST_TIMEOUT_MS): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on("data", (d) => chunks.push(d));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString("utf8"));
    });
    socket.write(bytes);
  });
}

const RAW_REQUESTS: { name: string; bytes: (auth: string) => string; status: number }[] = [
  { name: "Content-Length not a number", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nContent-Length: abc\r\n\r\n{}`, status: 400 },
  { name: "negative Content-Length", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Content-Length: -5\r\n\r\n{}`, status: 400 },
  { name: "two different Content-Lengths", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Content-Length: 2\r\nContent-Length: 5\r\n\r\n{}`, status: 400 },
  { name: "Content-Length and chunked together", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`, status: 400 },
  { name: "broken chunk size", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`, status: 400 },
  { name: "chunk without its CRLF", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n`, status: 400 },
  { name: "unknown transfer coding", bytes: (a) => `POST /v1/runs HTTP/1.1\r\nHost: x\r\n${a}Transfer-Encoding: gzip, chunked, zz\r\n\r\n0\r\n\r\n`, status: 400 },
  { name: "unknown method", bytes: (a) => `FROB /v1/plans HTTP/1.1\r\nHost: x\r\n${a}\r\n`, status: 400 },
  { name: "lower-case method", bytes: (a) => `get /v1/plans HTTP/1.1\r\nHost: x\r\n${a}\r\n`, status: 400 },
  { name: "garbage request line", bytes: () => `\x00\x01\x02 nonsense\r\n\r\n`, status: 400 },
  { name: "HTTP/9.9", bytes: (a) => `GET /v1/plans HTTP/9.9\r\nHost: x\r\n${a}\r\n`, status: 400 },
  { name: "header without a colon", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}NoColonHere\r\n\r\n`, status: 400 },
  { name: "header with a space before the colon", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}Bad Header : 1\r\n\r\n`, status: 400 },
  { name: "NUL in a header", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}X-A: a\x00b\r\n\r\n`, status: 400 },
  { name: "bare LF line endings mixed with CR", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}X-A: 1\rX-B: 2\r\n\r\n`, status: 400 },
  { name: "oversized header", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}X-Big: ${"a".repeat(20_000)}\r\n\r\n`, status: 431 },
  { name: "many headers", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}${Array.from({ length: 3000 }, (_, i) => `X-H${i}: v`).join("\r\n")}\r\n\r\n`, status: 431 },
  { name: "oversized URL", bytes: (a) => `GET /v1/users/${"u".repeat(20_000)} HTTP/1.1\r\nHost: x\r\n${a}\r\n`, status: 431 },
  { name: "space in the path", bytes: (a) => `GET /v1/pl ans HTTP/1.1\r\nHost: x\r\n${a}\r\n`, status: 400 },
  { name: "HTTP/1.1 without Host", bytes: (a) => `GET /v1/plans HTTP/1.1\r\n${a}\r\n`, status: 400 },
  { name: "an Expect other than 100-continue", bytes: (a) => `GET /v1/plans HTTP/1.1\r\nHost: x\r\n${a}Expect: teapot\r\n\r\n`, status: 417 },
  { name: "a target that is no path", bytes: (a) => `GET http://[:::/v1/plans HTTP/1.1\r\nHost: x\r\n${a}\r\n`, status: 400 },
  { name: "asterisk target", bytes: (a) => `GET * HTTP/1.1\r\nHost: x\r\n${a}\r\n`, status: 400 },
  { name: "CONNECT", bytes: (a) => `CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n${a}\r\n`, status: 405 },
];

onEachDatabase("malformed input on $db.name", (db) => {
  let server: TestServer;
  let routes: Route[];
  let creds: Creds;

  beforeAll(async () => {
    server = await startTestServerOn(db);
    const tenant = { appId: server.dev.appId, environment: "test" as const };
    const [owner, disposableOwner] = [await signInOwner(server), await signInOwner(server, { appId: null })];
    creds = { appKey: server.dev.appKey, session: (await server.services.sessions.mint(tenant, "fuzz-user")).token, pk: server.dev.connectKey, owner, disposableOwner };
    // Owner routes act on an app the signed-in owner is a member of: their handlers are reached, not only refused as another app's.
    routes = routesFromContract().map((r) => (r.auth === "owner" && r.params.app ? { ...r, params: { ...r.params, app: server.dev.appId } } : r));
  });
  afterAll(async () => {
    await server?.close();
  });

  it(`every route, every class of bad input: no 5xx, only the envelope, no hang (${RUNS} random on top, seed ${SEED})`, { timeout: 600_000 }, async () => {
    const cases = buildCases(routes, creds, RUNS, SEED);
    expect(cases.length).toBeGreaterThanOrEqual(2000);
    const base = new URL(server.url);
    const problems: string[] = [];
    const byStatus: Record<number, number> = {};
    const msByClass: Record<string, number> = {};
    let next = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < cases.length) {
          const c = cases[next++];
          const where = `${c.route.name} [${c.cls}] ${c.method} ${c.target.slice(0, 120)}`;
          const t0 = Date.now();
          try {
            const a = await send(base, c);
            msByClass[c.cls] = (msByClass[c.cls] ?? 0) + Date.now() - t0;
            byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
            const p = problemWith(c, a);
            if (p) problems.push(`${where}: ${p}`);
          } catch (err) {
            problems.push(`${where}: ${(err as Error).message}`);
          }
        }
      }),
    );
    const seconds = (Date.now() - started) / 1000;
    console.log(`${db.name}: ${cases.length} requests in ${seconds.toFixed(1)} s, by status ${JSON.stringify(byStatus)}, ms by class ${JSON.stringify(msByClass)}`);
    expect(problems.slice(0, 30), `${problems.length} problems`).toEqual([]);
  });

  it("what Node's HTTP parser refuses is answered in the envelope, then the connection closes", { timeout: 120_000 }, async () => {
    const port = Number(new URL(server.url).port);
    const auth = `Authorization: Bearer ${creds.appKey}\r\n`;
    const problems: string[] = [];
    for (const r of RAW_REQUESTS) {
      for (const withAuth of [true, false]) {
        const answer = await rawExchange(port, r.bytes(withAuth ? auth : "")).catch((err: Error) => `HANG ${err.message}`);
        const [head, body = ""] = answer.split("\r\n\r\n");
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]);
        if (status !== r.status) {
          problems.push(`${r.name}: expected ${r.status}, got ${head.split("\r\n")[0] || "(nothing)"}`);
          continue;
        }
        const parsed = (() => {
          try {
            return ErrorEnvelope.safeParse(JSON.parse(body));
          } catch {
            return null;
          }
        })();
        if (!parsed?.success) problems.push(`${r.name}: not the envelope: ${body.slice(0, 200)}`);
        else if (!new RegExp(`Request-Id: ${parsed.data.error.requestId}`, "i").test(head)) problems.push(`${r.name}: no Request-Id header matching the envelope`);
      }
    }
    expect(problems).toEqual([]);
  });

  it("afterwards the server still answers and its log holds no unhandled error", async () => {
    const res = await server.fetch("/v1/plans", { headers: { authorization: `Bearer ${creds.appKey}` } });
    expect(res.status).toBe(200);
    const bad = server.logs.filter((l) => /unhandled|uncaught/i.test(l) || JSON.parse(l).level >= 50);
    expect(bad.slice(0, 5)).toEqual([]);
  });
});

/**
 * The real process (`server/main.ts`) with a fault injected the way a bug would throw
 * (test/helpers/escape-preload.mjs): an exception or rejection escaping from a request's
 * work is logged with that request's id and the process goes on serving; one thrown
 * outside any request stops it with exit code 1, for its supervisor to restart it.
 */
describe("the process survives what escapes a request", () => {
  afterAll(async () => {
    await stopAll();
    removeTempDirs();
  });

  it("an escaped exception or rejection in a request: logged with its id, the process goes on; outside any request: exit 1", { timeout: 120_000 }, async () => {
    const preload = new URL("../helpers/escape-preload.mjs", import.meta.url).pathname;
    const server = await startServerProcess(migratedTempDir("svc-escape-"), { NODE_OPTIONS: `--import=${preload}`, LOG_LEVEL: "info" });
    const key = server.banner()!.appKey;
    const post = (prompt: string) =>
      server.fetch("/v1/runs", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ user: "u-escape", prompt }) });
    for (const prompt of ["__svc_escape_test__ exception", "__svc_escape_test__ rejection"]) {
      const res = await post(prompt);
      const requestId = res.headers.get("request-id");
      const body = await res.json();
      expect(body.error?.requestId ?? requestId, JSON.stringify(body)).toBe(requestId);
      await expect
        .poll(() => server.logs().some((l) => l.requestId === requestId && l.msg === "unhandled error" && String((l.err as { message?: string })?.message).includes("svc escape test")), { timeout: 10_000 })
        .toBe(true);
      expect(server.running, server.output()).toBe(true);
    }
    // Still serving, also the bomb the issue found (a deep body holding a \u escape).
    const plans = await server.fetch("/v1/plans", { headers: { authorization: `Bearer ${key}` } });
    expect(plans.status).toBe(200);
    const bomb = await server.fetch("/v1/runs", { method: "POST", headers: { "content-type": "application/json" }, body: "[".repeat(10_000) + '"\\u0041"' + "]".repeat(10_000) });
    expect(bomb.status).toBe(400);
    expect(server.running).toBe(true);

    // Outside any request: the state is unknown, so it stops (exit 1) with a fatal line, for the supervisor.
    server.child.kill("SIGUSR2");
    const exit = await server.exited;
    expect(exit.code, server.output()).toBe(1);
    expect(server.logs().some((l) => l.level === 60 && String(l.msg).includes("uncaught exception outside any request"))).toBe(true);
  });
});
