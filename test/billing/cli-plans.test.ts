import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../helpers/server.js";
import { jsonOf, removeTempDirs, runCli, tempDir } from "../helpers/process.js";

/**
 * `svc plans ...` as an app developer runs it: the CLI in a child process,
 * talking to a running server through the API with the app key. A plans file
 * applied twice changes nothing the second time; `--archive-missing` archives
 * what the file dropped; a bad file or key says why and changes nothing.
 */
describe("svc plans, through the API with the app key", () => {
  let server: TestServer;
  let dir: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    server = await startTestServer({ kind: "pglite", dataDir: null });
    dir = tempDir("svc-cli-plans-");
    env = { SVC_API_KEY: server.dev.appKey, SVC_BASE_URL: `${server.url}/v1`, SVC_DATA_DIR: dir };
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    removeTempDirs();
  });

  const file = (name: string, plans: unknown[]) => {
    const p = path.join(dir, name);
    fs.writeFileSync(p, JSON.stringify({ plans }));
    return p;
  };
  const plans = async () => (await server.fetch("/v1/plans?archived=true", { headers: { authorization: `Bearer ${server.dev.appKey}` } }).then((r) => r.json())).data;

  it("applies a plans file: creates, then changes only what differs; the file's default wins", async () => {
    const first = file("plans.json", [
      { slug: "free", name: "Free", allowance: { unit: "runs", limit: 20 }, isDefault: true },
      { slug: "pro", name: "Pro", priceMicros: 12_000_000, allowance: { unit: "tokens", limit: 2_000_000 }, overage: true, overagePriceMicros: 1000, trialDays: 7, stripePriceId: "price_pro" },
    ]);
    const r = await runCli(["plans", "apply", first, "--json"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(jsonOf(r)).toEqual([{ slug: "pro", action: "created" }, { slug: "free", action: "created" }]);
    expect(await plans()).toMatchObject([
      { slug: "free", isDefault: true, allowance: { unit: "runs", limit: 20 } },
      { slug: "pro", priceMicros: 12_000_000, overage: true, trialDays: 7, stripePriceId: "price_pro" },
    ]);
    const again = await runCli(["plans", "apply", first, "--json"], env);
    expect(jsonOf(again)).toEqual([{ slug: "pro", action: "updated" }, { slug: "free", action: "updated" }]);
    expect((await plans()).length).toBe(2);
  });

  it("create, update and archive with flags; list shows them as a table", async () => {
    const created = await runCli(["plans", "create", "team", "--name", "Team", "--price", "49000000", "--runs", "500", "--spend-ceiling", "100000000", "--json"], env);
    expect(created.code, created.stderr).toBe(0);
    expect(jsonOf(created)).toMatchObject({ slug: "team", priceMicros: 49_000_000, allowance: { unit: "runs", limit: 500 }, spendCeilingMicros: 100_000_000 });
    const updated = await runCli(["plans", "update", "team", "--runs", "unlimited"], env);
    expect(updated.code, updated.stderr).toBe(0);
    expect(updated.stdout).toMatch(/updated team\s+49\.00 USD\/month\s+unlimited runs/);
    const list = await runCli(["plans", "list"], env);
    expect(list.stdout).toMatch(/^free .*20 runs.*stops.*\(default\)$/m);
    expect(list.stdout).toMatch(/^pro .*12\.00 USD\/month.*2000000 tokens.*overage 1000µ.*trial 7d$/m);
    const dropped = await runCli(["plans", "apply", file("fewer.json", [{ slug: "free", name: "Free", allowance: { unit: "runs", limit: 20 }, isDefault: true }]), "--archive-missing", "--json"], env);
    expect(jsonOf(dropped)).toEqual([
      { slug: "free", action: "updated" },
      { slug: "pro", action: "archived" },
      { slug: "team", action: "archived" },
    ]);
    expect((await plans()).filter((p: { archived: boolean }) => !p.archived).map((p: { slug: string }) => p.slug)).toEqual(["free"]);
  });

  it("a bad file, a bad flag or a wrong key says why and changes nothing", async () => {
    const before = await plans();
    const bad = await runCli(["plans", "apply", file("bad.json", [{ slug: "Not OK", name: "x" }])], env);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/bad\.json: plans\.0\.slug/);
    const flag = await runCli(["plans", "create", "x", "--price", "1.5"], env);
    expect(flag.code).not.toBe(0);
    expect(flag.stderr).toMatch(/whole number/);
    const key = await runCli(["plans", "list"], { ...env, SVC_API_KEY: "sk_svc_nope.nope" });
    expect(key.code).toBe(1);
    expect(key.stderr).toMatch(/401 invalid_credential/);
    const none = await runCli(["plans", "list"], { ...env, SVC_API_KEY: "" });
    expect(none.stderr).toMatch(/--api-key/);
    expect(await plans()).toEqual(before);
  });
});
