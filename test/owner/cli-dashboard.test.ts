import { afterAll, describe, expect, it } from "vitest";
import { jsonOf, removeTempDirs, runCli, startServerProcess, stopAll, tempDir, type ServerProcess } from "../helpers/process.js";
import { ownerClient } from "../helpers/owner.js";
import { migratedTempDir } from "../helpers/migrated-folder.js";

/**
 * `svc dashboard` as a person runs it: on a free data folder (it opens the database
 * itself) and on one a running server holds (through its admin socket), and the
 * first start's banner: each prints a one-time sign-in link that signs in through
 * the real HTTP route, once.
 */
const LINK = /\/dashboard\/sign-in#token=(olt_[A-Za-z0-9_-]{43})$/;
interface Printed {
  url: string;
  email: string;
  expiresAt: string;
  created: boolean;
}

describe("svc dashboard", () => {
  let server: ServerProcess | undefined;
  afterAll(async () => {
    await server?.stop();
    await stopAll();
    removeTempDirs();
  });
  const signIn = (s: ServerProcess, url: string) =>
    s.fetch("/v1/owner/sign_in/link", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: LINK.exec(url)![1] }) });

  it("on a free folder: makes the local owner of every app once, then signs in the same owner; an unknown --email is refused", { timeout: 120_000 }, async () => {
    const dir = migratedTempDir("svc-cli-dashboard-");
    const svc = (...args: string[]) => runCli(args, { SVC_DATA_DIR: dir });
    jsonOf(await svc("apps", "create", "--name", "Made by the CLI", "--json"));
    const first = jsonOf<Printed>(await svc("dashboard", "--json"));
    expect(first).toMatchObject({ email: "owner@svc.localhost", created: true });
    expect(first.url).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:4000${LINK.source}`));
    const again = jsonOf<Printed>(await svc("dashboard", "--json"));
    expect(again).toMatchObject({ email: "owner@svc.localhost", created: false });
    expect(again.url).not.toBe(first.url);
    const unknown = await svc("dashboard", "--email", "someone@example.com");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/No owner account has the email/);
    const text = await svc("dashboard");
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/Sign in to the dashboard as owner@svc\.localhost/);

    // The folder's server: the printed link signs in, as an owner of the CLI's app.
    server = await startServerProcess(dir);
    const viaSocket = jsonOf<Printed>(await svc("dashboard", "--json"));
    expect(viaSocket.url.startsWith(`${server.url}/dashboard/sign-in#token=`)).toBe(true);
    const o = await ownerClient(server, await signIn(server, viaSocket.url));
    const me = await (await o.fetch("/v1/owner/me")).json();
    expect(me.apps).toEqual([expect.objectContaining({ name: "Made by the CLI", role: "owner" })]);
    expect((await signIn(server, viaSocket.url)).status).toBe(401);
    await server.stop();
    server = undefined;
  });

  it("the first start's banner prints a sign-in link for the development app's owner", { timeout: 120_000 }, async () => {
    const dir = migratedTempDir("svc-dashboard-banner-");
    server = await startServerProcess(dir);
    const line = server.bannerLines().find((l) => /^\s+dashboard\s/.test(l))!;
    const url = /dashboard\s+(\S+)/.exec(line)![1];
    expect(url).toMatch(LINK);
    const o = await ownerClient(server, await signIn(server, url));
    const me = await (await o.fetch("/v1/owner/me")).json();
    expect(me.owner.email).toBe("owner@svc.localhost");
    expect(me.apps).toEqual([expect.objectContaining({ name: "Local development app", role: "owner" })]);
    // The banner is printed, never logged.
    expect(server.logs().some((l) => JSON.stringify(l).includes("olt_"))).toBe(false);
  });
});
