/**
 * Ledger rows per second under scenario 1 of bench:chat (`svc/echo`, every
 * request a run record and one ledger row), with the rows counted against the
 * requests served: they must be equal, exactly.
 *
 *   npm run bench:ledger            (node --conditions=svc-source --import tsx bench/ledger.ts)
 *
 * For each database (embedded PGlite, then Postgres when it answers), the load
 * client (bench/chat-load.ts, its own process) keeps SVC_BENCH_CONCURRENCY
 * requests in flight for a warm-up second and SVC_BENCH_SECONDS more, spread
 * over as many users; then the ledger is read: rows written during the load,
 * against every 200 the client received (warm-up and the tail included). A raw
 * `node:http` hello server measured in the same run gives the side-by-side ratio.
 * Exit code 1 when rows and requests differ (always), or on a missed target with
 * SVC_BENCH_STRICT=1.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { removeTempDirs, scratchPostgres, spawnNode, startBenchServer, type BenchServer } from "./lib.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 5);
const CONCURRENCY = Number(process.env.SVC_BENCH_CONCURRENCY ?? 64);
const POSTGRES_URL = process.env.SVC_BENCH_POSTGRES_URL ?? process.env.SVC_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
/** Scenario 1's target for svc/echo against the hello server, which the ledger's rows/s inherits. */
const TARGET_VS_HELLO = 0.1;

interface Load {
  perSecond: number;
  total: number;
  okTotal: number;
  wallMs: number;
  errors: number;
  firstError: string;
  statuses: Record<string, number>;
}

async function load(url: string, headers: Record<string, string>, body: string): Promise<Load> {
  const child = spawnNode(["--import", "tsx", "bench/chat-load.ts", JSON.stringify({ mode: "rps", url, headers, body, concurrency: CONCURRENCY, warmSeconds: 1, seconds: SECONDS })]);
  try {
    const m = await child.waitFor(/^RESULT (.*)$/m, (SECONDS + 60) * 1000);
    return JSON.parse(m[1]) as Load;
  } finally {
    child.stop();
  }
}

async function hello(): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end('{"hello":"world"}'));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, close: () => new Promise((r) => server.close(() => r())) };
}

async function ledgerRows(server: BenchServer): Promise<number> {
  const rows = await server.db.query<{ n: string | number }>(`SELECT count(*) AS n FROM usage_rows`);
  return Number(rows[0].n);
}

const say = (s: string) => process.stdout.write(`${s}\n`);
const f = (n: number, d = 0) => n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

say(`bench:ledger: svc/echo (scenario 1 of bench:chat), ${CONCURRENCY} in flight over ${CONCURRENCY} users, 1 s warm-up + ${SECONDS} s, per database`);
const h = await hello();
const json = { "content-type": "application/json" };
const base = await load(h.url, json, "{}");
await h.close();
say(`  hello (node:http): ${f(base.perSecond)} req/s`);

const targets: { name: string; target: () => Promise<{ target: Parameters<typeof startBenchServer>[0]; drop(): Promise<void> } | null> }[] = [
  { name: "pglite", target: async () => ({ target: { kind: "pglite", dataDir: null }, drop: async () => {} }) },
  {
    name: "postgres",
    target: async () => {
      const pg = await scratchPostgres(POSTGRES_URL);
      if ("error" in pg) {
        say(`  postgres: skipped (${pg.error})`);
        return null;
      }
      return { target: { kind: "postgres", url: pg.url }, drop: pg.drop };
    },
  },
];

const table: string[][] = [["database", "requests served (200)", "ledger rows written", "equal", "rows/s (whole load)", "req/s in window", "÷ hello", "target"]];
let unequal = false;
let missed = false;
for (const t of targets) {
  const made = await t.target();
  if (!made) continue;
  const server = await startBenchServer(made.target);
  try {
    const before = await ledgerRows(server);
    const body = JSON.stringify({ model: "svc/echo", user: "bench-user-{k}", messages: [{ role: "user", content: "Hello, how are you today?" }] });
    const r = await load(`${server.url}/v1/chat/completions`, { ...json, authorization: `Bearer ${server.appKey}` }, body);
    const written = (await ledgerRows(server)) - before;
    const equal = written === r.okTotal && r.errors === 0;
    unequal ||= !equal;
    const ratio = r.perSecond / base.perSecond;
    missed ||= ratio < TARGET_VS_HELLO;
    table.push([
      t.name,
      f(r.okTotal),
      f(written),
      equal ? "yes" : `NO (${r.errors} client errors, statuses ${JSON.stringify(r.statuses)})`,
      f(written / (r.wallMs / 1000)),
      f(r.perSecond),
      `${f(ratio, 3)}×`,
      `≥ ${TARGET_VS_HELLO}× ${ratio >= TARGET_VS_HELLO ? "pass" : "MISS"}`,
    ]);
  } finally {
    await server.close();
    await made.drop();
  }
}
removeTempDirs();

const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
for (const row of table) say(`  ${row.map((c, i) => c.padEnd(widths[i])).join("  ")}`);
if (unequal) say("rows and requests served differ: the ledger lost or doubled a row");
process.exit(unequal || (missed && process.env.SVC_BENCH_STRICT === "1") ? 1 : 0);
