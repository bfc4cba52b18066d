import { afterAll, describe, expect, it } from "vitest";
import { ConfigError, parseConfig } from "../../server/config.js";
import { onEachDatabase, DATABASES, postgresAvailable, withClient } from "../helpers/databases.js";
import { startTestServerOn } from "../helpers/server.js";
import { removeTempDirs, startServerProcess, stopAll, tempDir } from "../helpers/process.js";
import { bearer } from "../helpers/requests.js";
import { Svc } from "@svc/sdk";

/**
 * The development app and its printed key exist only where the operator asks for
 * them: on the embedded database's first start (a developer's `npm start`), or with
 * `SVC_DEV_APP=1`; never by default on Postgres, where the instances of a production
 * deployment would each print a live credential into their logs.
 */

afterAll(async () => {
  await stopAll();
  removeTempDirs();
});

describe("SVC_DEV_APP", () => {
  it("is 1, 0 or unset; anything else stops the start naming it", () => {
    expect(parseConfig({}).devApp).toBeNull();
    expect(parseConfig({ SVC_DEV_APP: "1" }).devApp).toBe(true);
    expect(parseConfig({ SVC_DEV_APP: "0" }).devApp).toBe(false);
    expect(() => parseConfig({ SVC_DEV_APP: "yes" })).toThrow(ConfigError);
    expect(() => parseConfig({ SVC_DEV_APP: "yes" })).toThrow(/SVC_DEV_APP/);
  });
});

onEachDatabase("the development app on $db.name", (db) => {
  const start = async (flag: "" | "0" | "1") => {
    const server = await startTestServerOn(db, { SVC_DEV_APP: flag });
    const apps = await server.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM apps`);
    const printed = server.printed.join("");
    await server.close();
    return { printed, apps: apps[0].n };
  };

  it(`unset: ${db.name === "pglite" ? "created and printed on the first start" : "none created, no key printed"}`, async () => {
    const { printed, apps } = await start("");
    if (db.name === "pglite") {
      expect(printed).toMatch(/A local development app was created/);
      expect(apps).toBe(1);
    } else {
      expect(printed).toBe("");
      expect(apps).toBe(0);
    }
  });

  it("SVC_DEV_APP=0: none, on any database", async () => {
    expect(await start("0")).toEqual({ printed: "", apps: 0 });
  });

  it("SVC_DEV_APP=1: created and printed on an empty database, on any database", async () => {
    const { printed, apps } = await start("1");
    expect(printed).toMatch(/app key\s+sk_svc_/);
    expect(apps).toBe(1);
  });
});

describe("the first start's banner", () => {
  it("prints export lines the SDK reads as they stand, and the next step (the connect page, the pairing doc)", async () => {
    const server = await startTestServerOn(DATABASES[0].db);
    try {
      const banner = server.printed.join("");
      const exported = Object.fromEntries([...banner.matchAll(/^\s*export (\w+)=(\S+)$/gm)].map((m) => [m[1], m[2]]));
      expect(Object.keys(exported)).toEqual(["SVC_BASE_URL", "SVC_API_KEY", "SVC_CONNECT_KEY"]);
      // The connect key the quick start pairs with: the one the banner names, and a connect key of this service.
      expect(exported.SVC_CONNECT_KEY).toMatch(/^pk_svc_/);
      expect((await server.fetch(`/c/${exported.SVC_CONNECT_KEY}/v1/device/code`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ hostname: "h", platform: "linux", arch: "x64", client: "test" }) })).status).toBe(200);
      const saved = { base: process.env.SVC_BASE_URL, key: process.env.SVC_API_KEY };
      process.env.SVC_BASE_URL = exported.SVC_BASE_URL;
      process.env.SVC_API_KEY = exported.SVC_API_KEY;
      try {
        // What a developer does after pasting them: new Svc() with no options.
        const models = await new Svc().models.list();
        expect(models.data.map((m) => m.id)).toContain("svc/echo");
      } finally {
        for (const [name, value] of [["SVC_BASE_URL", saved.base], ["SVC_API_KEY", saved.key]] as const) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
      }
      expect(banner).toContain(`${server.url}/connect`);
      expect(banner).toContain("docs/app/pairing.md");
      expect((await server.fetch("/connect")).status).toBe(200);
    } finally {
      await server.close();
    }
  });
});

describe.skipIf(!postgresAvailable)("a server process on Postgres", () => {
  it("without the flag prints no key and creates no app; with SVC_DEV_APP=1 the first start on the empty database does", async () => {
    const made = await DATABASES[1].db.create();
    try {
      const url = (made.target as { url: string }).url;
      const plain = await startServerProcess(tempDir("svc-devapp-"), { DATABASE_URL: url });
      expect(plain.banner(), plain.output()).toBeNull();
      expect(plain.bannerLines(), plain.output()).toEqual([]);
      expect(plain.output()).not.toMatch(/sk_svc_|pk_svc_/);
      expect(await plain.stop()).toEqual({ code: 0, signal: null });
      const count = () => withClient(url, async (c) => (await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM apps`)).rows[0].n);
      expect(await count()).toBe(0);

      const asked = await startServerProcess(tempDir("svc-devapp-"), { DATABASE_URL: url, SVC_DEV_APP: "1" });
      const dev = asked.banner();
      expect(dev, asked.output()).not.toBeNull();
      expect((await asked.fetch("/v1/plans", { headers: bearer(dev!.appKey) })).status).toBe(200);
      expect(await asked.stop()).toEqual({ code: 0, signal: null });
      expect(await count()).toBe(1);
    } finally {
      await made.drop();
    }
  });
});
